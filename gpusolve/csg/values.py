"""CSG values: a game gives a value v(C) to every coalition C (a bitmask: agent i is bit i); here the
standard distributions v is drawn from, and the files that hold v.

A file holds n, then the 2^n values in mask order (text), or the 2^n values (.npy).

Value distributions (seeded, `generate_values`), as used throughout the CSG
literature (Rahwan et al., JAIR 34, 2009; Michalak et al., AIJ 230, 2016):
uniform v = |C| U(0,1); normal v = |C| N(1, 0.1); NDCS v = N(|C|, sqrt|C|);
modified-uniform (Service & Adams 2010) v = U(0, 10|C|), plus U(0, 50) with
probability 0.2; agent-based: agent i has power p_i ~ U(0, 10) and in C a
performance U(0, 2 p_i), v(C) the sum over its members.
"""
from __future__ import annotations

from pathlib import Path

# NumPy and the readers' ParseError load in the functions that use them: the command line reads
# the names below without them.

DISTRIBUTIONS = ("uniform", "normal", "ndcs", "modified-uniform", "agent-based")
MAX_AGENTS = 32  # masks are 32-bit in the kernel
GEN_CHUNK = 1 << 22  # values generated (and scanned) per step: the stream of draws depends on it


class CSGError(ValueError):
    """A request that cannot run (bad n, distribution); the CLI prints it as one line, exit 2."""


def popcount(xp, m):
    """Set bits of each element of an integer array of values below 2^32 (NumPy or CuPy)."""
    m = m - ((m >> 1) & 0x55555555)
    m = (m & 0x33333333) + ((m >> 2) & 0x33333333)
    m = (m + (m >> 4)) & 0x0F0F0F0F
    return ((m * 0x01010101) & 0xFFFFFFFF) >> 24


def generate_values(distribution: str, n: int, seed: int) -> np.ndarray:
    """v for all 2^n coalitions (float64, v[0] = 0) drawn from a standard CSG distribution, seeded."""
    import numpy as np
    if distribution not in DISTRIBUTIONS:
        raise CSGError(f"unknown distribution {distribution!r} (choose from {', '.join(DISTRIBUTIONS)})")
    check_agents(n)
    rng = np.random.default_rng(seed)
    power = rng.uniform(0, 10, n) if distribution == "agent-based" else None
    step = min(GEN_CHUNK, 1 << n)
    offsets = np.arange(step, dtype=np.int64)
    low_sizes = popcount(np, offsets).astype(np.float64)
    v = np.empty(1 << n)
    for lo in range(0, 1 << n, step):  # chunks aligned to their size: mask = lo | offset
        size = low_sizes + bin(lo).count("1")
        if distribution == "uniform":
            chunk = size * rng.uniform(0, 1, step)
        elif distribution == "normal":
            chunk = size * rng.normal(1, 0.1, step)
        elif distribution == "ndcs":
            chunk = rng.normal(size, np.sqrt(size))
        elif distribution == "modified-uniform":
            chunk = rng.uniform(0, 10 * size)
            chunk += np.where(rng.random(step) < 0.2, rng.uniform(0, 50, step), 0.0)
        else:
            chunk = np.zeros(step)
            for i in range(n):
                if lo >> i & 1:
                    chunk += rng.uniform(0, 2 * power[i], step)
                elif 1 << i < step:
                    member = ((offsets >> i) & 1).astype(bool)
                    chunk[member] += rng.uniform(0, 2 * power[i], step // 2)
        v[lo:lo + step] = chunk
    v[0] = 0.0
    return v


def check_agents(n: int) -> None:
    if not 1 <= n <= MAX_AGENTS:
        raise CSGError(f"n = {n}: CSG takes 1 to {MAX_AGENTS} agents")


def read_values(path: str | Path) -> np.ndarray:
    """The values of a CSG file: text (n, then 2^n numbers in mask order) or .npy (2^n numbers).

    v[0], the empty coalition's value, is read but never used. Errors raise ParseError (FILE:LINE).
    """
    import numpy as np

    from gpusolve.parsers.errors import ParseError
    path = str(path)
    if path.endswith(".npy"):
        try:
            v = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ParseError(path, None, f"cannot read as .npy: {e}") from None
        if v.ndim != 1 or v.dtype.kind not in "iuf":
            raise ParseError(path, None, f"expected a 1-D numeric array, found shape {v.shape} of {v.dtype}")
        n = v.size.bit_length() - 1
        if v.size < 2 or v.size != 1 << n:
            raise ParseError(path, None, f"{v.size} values: expected 2^n for some n >= 1")
        check_file_agents(path, None, n)
        v = v.astype(np.float64, copy=False)
        bad = np.flatnonzero(~np.isfinite(v))
        if bad.size:
            raise ParseError(path, None, f"value of coalition {int(bad[0])} is {v[bad[0]]}: values must be finite")
        return v
    try:
        with open(path) as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ParseError(path, None, f"cannot read: {e}") from None
    tokens = text.split()
    if not tokens:
        raise ParseError(path, 1, "empty file: expected n, then 2^n coalition values")
    try:
        n = int(tokens[0])
    except ValueError:
        raise ParseError(path, _line_of(text, 0), f"expected the number of agents, found {tokens[0]!r}") from None
    check_file_agents(path, _line_of(text, 0), n)
    body = tokens[1:]
    if len(body) != 1 << n:
        at = len(tokens) - 1 if len(body) < 1 << n else (1 << n) + 1
        raise ParseError(path, _line_of(text, at),
                         f"n = {n} needs {1 << n} values (one per coalition, mask order), found {len(body)}")
    try:
        v = np.array(body, dtype=np.float64)
    except ValueError:
        i = next(i for i, tok in enumerate(body) if not _is_number(tok))
        raise ParseError(path, _line_of(text, i + 1), f"coalition {i}: {body[i]!r} is not a number") from None
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size:
        i = int(bad[0])
        raise ParseError(path, _line_of(text, i + 1), f"coalition {i}: value {body[i]} is not finite")
    return v


def check_file_agents(path: str, line: int | None, n: int) -> None:
    from gpusolve.parsers.errors import ParseError
    try:
        check_agents(n)
    except CSGError as e:
        raise ParseError(path, line, str(e)) from None


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


def _line_of(text: str, token_index: int) -> int:
    """1-based line of the token_index-th whitespace-separated token (only on the error path)."""
    for line_no, line in enumerate(text.splitlines(), 1):
        count = len(line.split())
        if token_index < count:
            return line_no
        token_index -= count
    return max(1, text.count("\n"))


def write_values(path: str | Path, v: np.ndarray) -> None:
    """Write values as a CSG file: .npy, or text (n, then one value per line, round-trip exact)."""
    import numpy as np
    path = str(path)
    if path.endswith(".npy"):
        np.save(path, v)
        return
    n = v.size.bit_length() - 1
    with open(path, "w") as fh:
        fh.write(f"{n}\n")
        np.savetxt(fh, v, fmt="%.17g")
