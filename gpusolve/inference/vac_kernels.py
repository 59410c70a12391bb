"""VAC's passes compiled with numba, for the search core's VAC on the CPU: pass 1 (arc consistency on
Bool_theta(P) in synchronous rounds), pass 2 (the units each deleted value owes, backwards from the
wipe-out) and pass 3 (the step lambda, then the cost moves).

They give what `vac.pass1`, `pass2`, `_net_units`, `_lambda` and `_apply` give (their reference, on NumPy
or CuPy), with the allowed tuples and live values as bits (a value's support on a side: one AND per 64
values) and the first round's supports kept from pass to pass, where the array code runs products over
whole tables. On scen07 (817 tables of 44 x 44) VAC took 16 CPU-s on NumPy and takes 1.9 compiled
(bench/vac.py). Compiled without the GIL (`nogil`), they also run beside other phases' threads, where the
array code, a Python call every few hundred microseconds, waited its turn (VAC's 10-12 s on scen07 became
15 s beside the schedule's phases). The callers hold every array, so nothing is allocated here (no
reference counting, and pycc builds them into the search core's module: `dfbb_build`).
"""
import numba
import numpy as np

jit = numba.njit(cache=True, nogil=True, _nrt=False)
# pycc's signatures: allowed (E, dl, dr), alive and supported (n, d) and (2E + 1, d), stale (2E + 1);
# rounds, killer, k, extend, need (n or 2E + 1, d); bits (2E + 1, d, words), live and first_live
# (n, words), first_supported (2E + 1, d), dirty (E), check (n); inc (n, degree), ev (E, 2); out (2);
# mark, touched (2E + 1)
SIGNATURES = {
    "ac_rounds": "i8(b1[:, :, ::1], b1[::1], u8[:, :, ::1], u8[:, ::1], u8[:, ::1], b1[:, ::1], b1[:, ::1], "
                 "i8[:, ::1], i8[:, ::1], i8[:, ::1], i8[:, ::1], b1[:, ::1], b1[::1], b1[::1], i8[::1])",
    "owed_units": "i8(b1[:, :, ::1], b1[:, ::1], i8[:, ::1], i8[:, ::1], i8[:, ::1], i8, i8, i8[:, ::1], "
                  "i8[:, ::1], i8[:, ::1], i8[::1], i8[::1], i8)",
    "step_size": "i8(i8[:, :, ::1], i8[:, ::1], i8[:, ::1], i8[:, ::1], i8[:, ::1], i8[:, ::1], i8, i8[:, ::1], "
                 "i8[::1], i8[::1])",
    "apply_step": "void(i8[:, :, ::1], i8[:, ::1], i8[:, ::1], i8[:, ::1], i8[:, ::1], i8[::1], i8, i8, i8, "
                  "b1[:, :, ::1], b1[::1], i8[::1], i8)",
}


@jit
def _pack(allowed, e, bits):
    """Table e's allowed tuples as bits: bits[2e, a] over the values b of its second variable, bits[2e + 1, b]
    over the values a of its first."""
    dl, dr = allowed.shape[1], allowed.shape[2]
    for a in range(dl):
        bits[2 * e, a, :] = 0
    for b in range(dr):
        bits[2 * e + 1, b, :] = 0
    one = np.uint64(1)
    for a in range(dl):
        for b in range(dr):
            if allowed[e, a, b]:
                bits[2 * e, a, b >> 6] |= one << np.uint64(b & 63)
                bits[2 * e + 1, b, a >> 6] |= one << np.uint64(a & 63)


@jit
def ac_rounds(allowed, dirty, bits, live, first_live, first_supported, alive, inc, ev, rounds, killer, supported,
              stale, check, out):
    """Pass 1 from `alive` (updated), `rounds` (0 where deleted by its unary cost, else -1) and `killer`
    (-1): out = (the wiped-out variable or -1, the last round). Returns the wiped-out variable or -1.

    bits (2E + 1, d, words) holds the allowed tuples as bits (`_pack`), repacked first for the tables
    marked dirty; live (n, words) gets the live values as bits: a value's support on a side is one AND
    per 64 values of the other variable. first_live and first_supported keep the first round's live
    values and supports for the next pass, which computes again only the sides of dirty tables and of
    variables whose live values differ (an earlier pass with every table dirty filled them)."""
    n, d = alive.shape
    sides, words = 2 * ev.shape[0], bits.shape[2]
    for s in range(sides):
        stale[s] = dirty[s // 2]
    for e in range(ev.shape[0]):
        if dirty[e]:
            _pack(allowed, e, bits)
            dirty[e] = False
    one = np.uint64(1)
    for v in range(n):
        live[v, :] = 0
        for a in range(d):
            if alive[v, a]:
                live[v, a >> 6] |= one << np.uint64(a & 63)
        changed = False
        for w in range(words):
            if live[v, w] != first_live[v, w]:
                changed = True
            first_live[v, w] = live[v, w]
        if changed:  # its own sides (values now live) and those facing it
            for j in range(inc.shape[1]):
                s = inc[v, j]
                if s < sides:
                    stale[s] = True
                    stale[s ^ 1] = True
    for s in range(sides):
        for a in range(d):
            supported[s, a] = first_supported[s, a]
    supported[sides, :] = True  # the padding side of inc
    r = 0
    while True:
        for v in range(n):
            wiped = True
            for w in range(words):
                if live[v, w] != 0:
                    wiped = False
                    break
            if wiped:
                out[0], out[1] = v, r
                return v
        r += 1
        for v in range(n):
            check[v] = r == 1  # in later rounds, only the variables with a side computed again
        for s in range(sides):  # each live value: a support among the other variable's live values
            if not stale[s]:
                continue
            stale[s] = False
            v, u = ev[s // 2, s % 2], ev[s // 2, 1 - s % 2]
            check[v] = True
            for a in range(d):
                found = False
                if alive[v, a]:
                    for w in range(words):
                        if bits[s, a, w] & live[u, w]:
                            found = True
                            break
                supported[s, a] = found
        if r == 1:
            for s in range(sides):
                for a in range(d):
                    first_supported[s, a] = supported[s, a]
        any_killed = False
        for v in range(n):
            if not check[v]:
                continue
            changed = False
            for a in range(d):
                if not alive[v, a]:
                    continue
                for j in range(inc.shape[1]):
                    s = inc[v, j]
                    if not supported[s, a]:
                        killer[v, a], rounds[v, a] = s, r
                        alive[v, a] = False
                        live[v, a >> 6] &= ~(one << np.uint64(a & 63))
                        changed = True
                        break
            if changed:  # the sides whose other variable is v
                any_killed = True
                for j in range(inc.shape[1]):
                    s = inc[v, j]
                    if s < sides:
                        stale[s ^ 1] = True
        if not any_killed:
            out[0], out[1] = -1, r
            return -1


@jit
def owed_units(allowed, valid, rounds, killer, ev, i0, last, k, extend, need, mark, touched, k_limit):
    """Pass 2 into k (n, d) and extend (2E + 1, d), both zero. need (2E + 1, d) and mark (2E + 1) are zero
    and stay so; touched is scratch of 2E + 1. Returns 0 where a count passed k_limit, else 1."""
    n, d = k.shape
    dl, dr = allowed.shape[1], allowed.shape[2]
    for a in range(d):
        k[i0, a] = 1 if valid[i0, a] else 0
    for r in range(last, 0, -1):
        count = 0
        for v in range(n):  # the value b of the other variable extends the most any value allowed with b owes
            for a in range(d):
                if rounds[v, a] != r or k[v, a] <= 0:
                    continue
                s = killer[v, a]
                e, t, o = s // 2, s % 2, s ^ 1
                if mark[o] == 0:
                    mark[o] = 1
                    touched[count] = o
                    count += 1
                owed = k[v, a]
                for b in range(dr if t == 0 else dl):
                    if (allowed[e, a, b] if t == 0 else allowed[e, b, a]) and owed > need[o, b]:
                        need[o, b] = owed
        for i in range(count):  # every need first: they read k of this round's values
            o = touched[i]
            mark[o] = 0
            u = ev[o // 2, o % 2]
            for b in range(d):
                if need[o, b] > extend[o, b]:
                    k[u, b] += need[o, b] - extend[o, b]
                    extend[o, b] = need[o, b]
                need[o, b] = 0
        for v in range(n):
            for a in range(d):
                if k[v, a] > k_limit:
                    return 0
    return 1


@jit
def step_size(T, U, rounds, killer, k, extend, top, net, edges, out):
    """Pass 3's step: net (2E + 1, d) gets the units each side's values lose (projections onto deleted
    values minus extensions from them), edges the tables they touch (returned: how many), out = (whether a
    finite cost bounds lambda, lambda, 0 for a variable or 1 for a table, its index, its cost): the
    largest integer step keeping every finite cost non-negative, where it is tightest (vac._lambda's)."""
    n, d = k.shape
    E, dl, dr = T.shape
    for s in range(2 * E):
        for a in range(d):
            net[s, a] = -extend[s, a]
    for v in range(n):
        for a in range(d):
            if rounds[v, a] > 0 and k[v, a] > 0:
                net[killer[v, a], a] += k[v, a]
    count = 0
    for e in range(E):
        for a in range(d):
            if net[2 * e, a] != 0 or net[2 * e + 1, a] != 0:
                edges[count] = e
                count += 1
                break
    out[0] = 0
    for v in range(n):
        for a in range(d):
            if rounds[v, a] == 0 and k[v, a] > 0 and U[v, a] < top:
                ratio = U[v, a] // k[v, a]
                if out[0] == 0 or ratio < out[1]:
                    out[0], out[1], out[2], out[3], out[4] = 1, ratio, 0, v, U[v, a]
    for i in range(count):
        e = edges[i]
        for a in range(dl):
            for b in range(dr):
                units = net[2 * e, a] + net[2 * e + 1, b]
                if units > 0 and T[e, a, b] < top:
                    ratio = T[e, a, b] // units
                    if out[0] == 0 or ratio < out[1]:
                        out[0], out[1], out[2], out[3], out[4] = 1, ratio, 1, e, T[e, a, b]
    return count


@jit
def apply_step(T, U, rounds, k, net, edges, count, lam, top, allowed, dirty, edge_theta, theta):
    """Pass 3 by lam: every tuple of the touched tables loses lam times its units (or gains, saturating),
    the values deleted by their own unary costs pay lam * k; Bool_theta's tuples of those tables follow
    (marked dirty for their bits)."""
    n, d = k.shape
    E, dl, dr = T.shape
    for i in range(count):
        e = edges[i]
        dirty[e] = True
        limit = max(edge_theta[e], theta)
        for a in range(dl):
            for b in range(dr):
                t = T[e, a, b]
                if t >= top:
                    t = top
                else:
                    units = net[2 * e, a] + net[2 * e + 1, b]
                    if units > 0:
                        t -= lam * units
                    elif -units > top // lam:
                        t = top
                    else:
                        t = min(t - units * lam, top)
                T[e, a, b] = t
                allowed[e, a, b] = t < limit
    for v in range(n):
        for a in range(d):
            if rounds[v, a] == 0 and k[v, a] > 0 and U[v, a] < top:
                U[v, a] -= lam * k[v, a]
