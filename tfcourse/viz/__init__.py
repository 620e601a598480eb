"""Pictures of what the Transformer computes (see the submodules)."""
