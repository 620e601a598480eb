"""Pictures of what the Transformer computes, drawn from the model itself.

- record: forward hooks that read every attention module's weights and every feed-forward
  network's hidden activations (reference classes or a learner's, alike);
- draw_links / draw_heads: attention as lines between tokens, one colour per head;
- draw_heatmap / draw_heatmaps: weights as heatmaps, compared panels on one colour scale;
- draw_ffn / draw_ffn_weights / unit_means / draw_units: the feed-forward network from the
  inside, its weights W_1 and W_2 included;
- draw_embedding_space / draw_positions_added / draw_groups: learned embeddings in two
  dimensions (PCA), and neighbour_agreement: how well they keep groups apart;
- draw_transformer / you_are_here: the paper's figure 1, labelled by chapter;
- AttentionExplorer / seq2seq_attention / draw_attention: a whole model's attention, one
  layer and head at a time, with ipywidgets controls when a kernel runs;
- ReadingExplorer: chapter 09's classifier, language model and masked language model read
  a typed text: their attention, and the classes / next character / fill-ins as bars.

Functions that draw make pyplot figures: end the cell with plt.show().
"""

from tfcourse.viz.embeddings import (
    draw_embedding_space,
    draw_groups,
    draw_positions_added,
    neighbour_agreement,
    pca,
)
from tfcourse.viz.explorer import AttentionExplorer, AttentionMap, draw_attention, seq2seq_attention
from tfcourse.viz.ffn import draw_ffn, draw_ffn_weights, draw_units, selective_units, unit_means
from tfcourse.viz.figure1 import draw_transformer, you_are_here
from tfcourse.viz.heatmaps import draw_heatmap, draw_heatmaps
from tfcourse.viz.links import draw_heads, draw_links
from tfcourse.viz.reading import ReadingExplorer
from tfcourse.viz.record import record

__all__ = [
    "AttentionExplorer", "AttentionMap", "draw_attention", "draw_embedding_space", "draw_ffn",
    "draw_groups", "neighbour_agreement",
    "draw_ffn_weights", "draw_heads", "draw_heatmap", "draw_heatmaps", "draw_links",
    "draw_positions_added", "pca", "draw_transformer", "draw_units", "ReadingExplorer", "record",
    "selective_units",
    "seq2seq_attention", "unit_means", "you_are_here",
]
