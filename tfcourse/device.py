"""Where and how torch runs: the device (cuda, then mps, then the cpu) and the CPU threads
(as many as the cores other programs leave idle)."""

import os
import sys
import time

import torch


def default_device() -> torch.device:
    """cuda if there is one, else Apple's mps, else the cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def free_cpu_cores(interval: float = 0.2) -> int:
    """The CPU cores that other programs leave idle, measured over ``interval`` seconds
    (from /proc/stat on Linux; elsewhere all cores count as idle), at least 1. Give torch
    that many threads: a thread on a busy core runs slowly, and the others wait for it at
    every operation (with two threads on two cores, one of them busy, a training step of
    the copy task takes several times longer than with one thread)."""
    ours = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        samples = []
        for k in range(2):
            if k:
                time.sleep(interval)
            with open(_PROC_STAT) as f:  # "cpu  user nice system idle iowait irq softirq steal"
                lines = f.read().splitlines()  # then one "cpuN ..." line per core
            ticks = [int(v) for v in lines[0].split()[1:9]]
            samples.append((ticks[3] + ticks[4], sum(ticks)))
        cpus = sum(line.startswith("cpu") and line[3].isdigit() for line in lines)
    except (OSError, ValueError, IndexError):
        return ours or 1
    (idle0, total0), (idle1, total1) = samples
    idle = (idle1 - idle0) / max(1, total1 - total0) * cpus  # in cores
    return max(1, min(ours or 1, int(idle + 0.5)))


_PROC_STAT = "/proc/stat"


def resolve_device(name: str) -> torch.device:
    """"auto" (default_device()), or a device name that this machine has: cpu, cuda, cuda:1,
    mps. ValueError for one it does not have."""
    if name == "auto":
        return default_device()
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None
    available = {"cuda": torch.cuda.is_available, "mps": torch.backends.mps.is_available}
    if device.type in available and not available[device.type]():
        raise ValueError(f"device {name!r} is not available on this machine")
    return device


def set_threads(value: int | str) -> str:
    """torch's intra-op threads: `value` (at most the machine's cores); for "auto"
    OMP_NUM_THREADS if it is set, else the idle cores. Returns a note for the user."""
    cores, note = os.cpu_count() or 1, ""
    if value != "auto":
        if value > cores:
            raise ValueError(f"--threads {value}: this machine has {cores} cores; more threads "
                             "than cores only slow each other down")
        torch.set_num_threads(value)
    elif not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(free_cpu_cores())
        if torch.get_num_threads() < cores:
            note = f" ({cores - torch.get_num_threads()} of {cores} cores busy)"
    threads = torch.get_num_threads()
    return f"{threads} thread{'s' if threads > 1 else ''}{note}"


def free_memory(device: torch.device) -> int:
    """Bytes that ``device`` can still hold: a GPU's free memory, or the memory the operating
    system has available (MemAvailable on Linux)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open(_PROC_MEMINFO) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


_PROC_MEMINFO = "/proc/meminfo"


def check_fits(nbytes: float, what: str, device: torch.device, advice: str) -> None:
    """ValueError when ``nbytes`` would not fit in the free memory of ``device``: ``what``
    names what needs it (e.g. "--batch-size 1000000000"), ``advice`` what to do instead."""
    free = free_memory(device)
    if nbytes > free:
        raise ValueError(f"{what} needs about {_size(nbytes)} of memory, more than the "
                         f"{_size(free)} free on {device.type}: {advice}")


def _size(nbytes: float) -> str:
    if nbytes < 1000:
        return f"{nbytes:.0f} bytes"
    for unit in ("KB", "MB", "GB"):
        nbytes /= 1000
        if nbytes < 1000:
            return f"{nbytes:,.1f} {unit}"
    return f"{nbytes / 1000:,.1f} TB"


def leave_torchrun_process(code: int = 0) -> None:
    """End a torchrun worker whose work is done and whose process group is destroyed, without
    the interpreter's teardown: on a busy CPU, torch 2.13's gloo backend sometimes leaves a
    thread that aborts the process then ("terminate called without an active exception":
    about 1 run in 10 of the demo with two busy cores), and torchrun reports the whole job
    failed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
