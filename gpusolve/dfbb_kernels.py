"""The compiled kernels of `dfbb`: numba functions over the flat state vector and the trail.

Imported only when a search runs (numba's import and its on-disk cache cost a
fraction of a second); `cache=True` makes a second process load rather than
compile them.
"""
import numba

from .dfbb import (BACKTRACK, BRANCH, COMPLETE, DEPTH, FAILS, FOUND, GROW, LAST, LEFT, LEVEL, MODE, NODES,
                   PAUSED, PROPAGATE, QLEN, RIGHT, TRAIL, UB)

jit = numba.njit(cache=True, nogil=True)


@jit
def put(S, idx, val, trail, stamp, ctl):
    if stamp[idx] != ctl[LEVEL]:
        t = ctl[TRAIL]
        trail[t, 0] = idx
        trail[t, 1] = S[idx]
        ctl[TRAIL] = t + 1
        stamp[idx] = ctl[LEVEL]
    S[idx] = val


@jit
def bcost(S, lay, k, T, boff, bdj, top, a, b):
    """Binary function k's current cost at (a of its first variable, b of its second)."""
    t = T[boff[k] + a * bdj[k] + b]
    if t >= top:
        return top
    d = lay[1]
    return t - S[lay[4] + (2 * k) * d + a] - S[lay[4] + (2 * k + 1) * d + b]


@jit
def enqueue(x, queue, inq, ctl):
    if inq[x] == 0:
        inq[x] = 1
        queue[ctl[QLEN]] = x
        ctl[QLEN] += 1


@jit
def remove(S, lay, x, a, trail, stamp, ctl, queue, inq):
    """Prune value a of x; False when x's domain is wiped out."""
    d = lay[1]
    put(S, lay[2] + x * d + a, 0, trail, stamp, ctl)
    put(S, lay[3] + x, S[lay[3] + x] - 1, trail, stamp, ctl)
    enqueue(x, queue, inq, ctl)
    return S[lay[3] + x] > 0


@jit
def node_consistent(S, lay, x, top, trail, stamp, ctl, queue, inq):
    """NC* on x: its least unary cost goes to c0, values reaching the bound are pruned."""
    d, U, A = lay[1], lay[0], lay[2]
    low = top
    for a in range(d):
        if S[A + x * d + a] and S[U + x * d + a] < low:
            low = S[U + x * d + a]
    if low >= top:
        return False
    if low > 0:
        for a in range(d):
            i = U + x * d + a
            if S[A + x * d + a] and S[i] < top:
                put(S, i, S[i] - low, trail, stamp, ctl)
        put(S, 0, min(S[0] + low, top), trail, stamp, ctl)
    ub = ctl[UB]
    if S[0] >= ub:
        return False
    for a in range(d):
        if S[A + x * d + a] and S[0] + S[U + x * d + a] >= ub:
            if not remove(S, lay, x, a, trail, stamp, ctl, queue, inq):
                return False
    return True


@jit
def revise(S, lay, k, side, T, boff, bdj, bvar, top, res, trail, stamp, ctl):
    """Give every value of k's variable on `side` a support in the other's domain, projecting
    the least cost onto its unary cost; True when a unary cost rose."""
    d, U, A = lay[1], lay[0], lay[2]
    y = bvar[2 * k + side]
    x = bvar[2 * k + 1 - side]
    raised = False
    only = value_of(S, lay, x) if S[lay[3] + x] == 1 else -1  # an assigned x: its value is the support
    for b in range(d):
        if S[A + y * d + b] == 0:
            continue
        if only >= 0:
            low, arg = pair_cost(S, lay, k, side, T, boff, bdj, top, b, only), only
        else:
            r = res[(2 * k + side) * d + b]
            if r >= 0 and S[A + x * d + r] and pair_cost(S, lay, k, side, T, boff, bdj, top, b, r) == 0:
                continue
            low, arg = top, -1
            for a in range(d):
                if S[A + x * d + a]:
                    c = pair_cost(S, lay, k, side, T, boff, bdj, top, b, a)
                    if c < low:
                        low, arg = c, a
                        if c == 0:
                            break
            res[(2 * k + side) * d + b] = arg
        if low > 0:
            i = U + y * d + b
            if low >= top:
                put(S, i, top, trail, stamp, ctl)
            else:
                p = lay[4] + (2 * k + side) * d + b
                put(S, p, S[p] + low, trail, stamp, ctl)
                put(S, i, min(S[i] + low, top), trail, stamp, ctl)
            raised = True
    return raised


@jit
def pair_cost(S, lay, k, side, T, boff, bdj, top, b, a):
    """k's cost at value b of its variable on `side` and value a of the other."""
    if side == 0:
        return bcost(S, lay, k, T, boff, bdj, top, b, a)
    return bcost(S, lay, k, T, boff, bdj, top, a, b)


@jit
def value_of(S, lay, x):
    d = lay[1]
    for a in range(d):
        if S[lay[2] + x * d + a]:
            return a
    return -1


@jit
def project_nary(S, lay, k, nptr, nscope, nstride, noff, NT, top, trail, stamp, ctl):
    """All but one variable of n-ary function k are assigned: its costs given them go onto the
    last one's unary costs (or onto c0 when none is left); the function is then used up."""
    d, U, A = lay[1], lay[0], lay[2]
    base, free = noff[k], -1
    for p in range(nptr[k], nptr[k + 1]):
        v = nscope[p]
        if S[lay[3] + v] == 1 and S[lay[5] + v] == 1:
            base += value_of(S, lay, v) * nstride[p]
        else:
            free = p
    if free < 0:
        put(S, 0, min(S[0] + NT[base], top), trail, stamp, ctl)
        return -1
    z = nscope[free]
    for c in range(d):
        if S[A + z * d + c]:
            i = U + z * d + c
            put(S, i, min(S[i] + NT[base + c * nstride[free]], top), trail, stamp, ctl)
    return z


@jit
def full_support(S, lay, k, T, boff, bdj, bvar, top, tmp, trail, stamp, ctl):
    """DAC* on k = (i, j), i < j: every value a of i gets a full support b (c(a, b) + u_j(b) = 0) by
    extending u_j onto k and projecting k onto u_i. Returns 1 when u_i rose, + 2 when u_j was extended."""
    d, U, A, P = lay[1], lay[0], lay[2], lay[4]
    i, j = bvar[2 * k], bvar[2 * k + 1]
    rise = False
    for a in range(d):
        tmp[a] = 0
        if S[A + i * d + a] == 0:
            continue
        low = top
        for b in range(d):
            if S[A + j * d + b]:
                c = bcost(S, lay, k, T, boff, bdj, top, a, b)
                if c < top and c + S[U + j * d + b] < low:
                    low = c + S[U + j * d + b]
                    if low == 0:
                        break
        tmp[a] = low
        rise = rise or low > 0
    if not rise:
        return 0
    out = 1
    for b in range(d):
        if S[A + j * d + b] == 0:
            continue
        e = 0
        for a in range(d):
            if S[A + i * d + a] and 0 < tmp[a] < top:
                c = bcost(S, lay, k, T, boff, bdj, top, a, b)
                if c < top and tmp[a] - c > e:
                    e = tmp[a] - c
        if e > 0:
            q = P + (2 * k + 1) * d + b
            put(S, q, S[q] - e, trail, stamp, ctl)
            put(S, U + j * d + b, S[U + j * d + b] - e, trail, stamp, ctl)
            out = 3
    for a in range(d):
        if S[A + i * d + a] and tmp[a] > 0:
            u = U + i * d + a
            if tmp[a] >= top:
                put(S, u, top, trail, stamp, ctl)
            else:
                q = P + (2 * k) * d + a
                put(S, q, S[q] + tmp[a], trail, stamp, ctl)
                put(S, u, min(S[u] + tmp[a], top), trail, stamp, ctl)
    return out


@jit
def nc_everywhere(S, lay, trail, stamp, ctl, queue, inq):
    """Prune every value whose unary cost plus c0 reaches the upper bound; False on a wipe-out."""
    n, d = lay[6], lay[1]
    for x in range(n):
        for a in range(d):
            if S[lay[2] + x * d + a] and S[0] + S[lay[0] + x * d + a] >= ctl[UB]:
                if not remove(S, lay, x, a, trail, stamp, ctl, queue, inq):
                    return False
    return True


@jit
def propagate(S, lay, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, nptr, nscope, nstride, noff, NT,
              nadj_ptr, nadj_k, top, res, weight, trail, stamp, ctl, queue, inq, inr, tmp):
    """FDAC* (AC* and DAC* in variable order) to a fixpoint; False on a wipe-out or when c0 reaches
    the upper bound. `queue` holds the variables whose domains shrank (their neighbours' supports to
    check), `inr` those whose unary costs rose or domains shrank (full supports towards them)."""
    n = lay[6]
    m = lay[7]
    if not nc_everywhere(S, lay, trail, stamp, ctl, queue, inq):
        return False
    while True:
        while ctl[QLEN] > 0:
            ctl[QLEN] -= 1
            x = queue[ctl[QLEN]]
            inq[x] = 0
            inr[x] = 1
            if not node_consistent(S, lay, x, top, trail, stamp, ctl, queue, inq):  # its least cost may rise
                return False
            if S[lay[3] + x] == 1 and S[lay[5] + x] == 0:  # x just got assigned
                put(S, lay[5] + x, 1, trail, stamp, ctl)
                for p in range(nadj_ptr[x], nadj_ptr[x + 1]):
                    k = nadj_k[p]
                    left = S[lay[8] + k] - 1
                    put(S, lay[8] + k, left, trail, stamp, ctl)
                    if left == 1:
                        z = project_nary(S, lay, k, nptr, nscope, nstride, noff, NT, top, trail, stamp, ctl)
                        ok = z < 0 or node_consistent(S, lay, z, top, trail, stamp, ctl, queue, inq)
                        if not ok or S[0] >= ctl[UB]:
                            weight[m + k] += 1
                            return False
                        if z >= 0:
                            inr[z] = 1
            for p in range(adj_ptr[x], adj_ptr[x + 1]):
                k, side = adj_k[p], adj_side[p]
                y = bvar[2 * k + 1 - side]
                if revise(S, lay, k, 1 - side, T, boff, bdj, bvar, top, res, trail, stamp, ctl):
                    inr[y] = 1
                    if not node_consistent(S, lay, y, top, trail, stamp, ctl, queue, inq):
                        weight[k] += 1
                        return False
            if ctl[QLEN] == 0 and not nc_everywhere(S, lay, trail, stamp, ctl, queue, inq):  # c0 may have risen
                return False
        j = n - 1
        while j >= 0 and inr[j] == 0:
            j -= 1
        if j < 0:
            return True
        inr[j] = 0
        for p in range(adj_ptr[j], adj_ptr[j + 1]):
            if adj_side[p] != 1:
                continue
            k = adj_k[p]
            i = bvar[2 * k]
            out = full_support(S, lay, k, T, boff, bdj, bvar, top, tmp, trail, stamp, ctl)
            if out & 1:
                inr[i] = 1
                if not node_consistent(S, lay, i, top, trail, stamp, ctl, queue, inq):
                    weight[k] += 1
                    return False
            if out & 2 and revise(S, lay, k, 1, T, boff, bdj, bvar, top, res, trail, stamp, ctl):
                inr[j] = 1
                if not node_consistent(S, lay, j, top, trail, stamp, ctl, queue, inq):
                    weight[k] += 1
                    return False
        if not nc_everywhere(S, lay, trail, stamp, ctl, queue, inq):
            return False


@jit
def clear_queue(ctl, queue, inq, inr):
    for i in range(ctl[QLEN]):
        inq[queue[i]] = 0
    ctl[QLEN] = 0
    inr[:] = 0


@jit
def choose(S, lay, adj_ptr, adj_k, adj_side, bvar, nadj_ptr, nadj_k, weight, best, ctl):
    """(variable, value): last conflict, else least domain over weighted degree; least unary cost."""
    n, d, m = lay[6], lay[1], lay[7]
    x = ctl[LAST]
    if x < 0 or S[lay[3] + x] <= 1:
        x, bs, bw = -1, 0, 1
        for v in range(n):
            s = S[lay[3] + v]
            if s <= 1:
                continue
            w = 1
            for p in range(adj_ptr[v], adj_ptr[v + 1]):
                k = adj_k[p]
                if S[lay[3] + bvar[2 * k + 1 - adj_side[p]]] > 1:
                    w += weight[k]
            for p in range(nadj_ptr[v], nadj_ptr[v + 1]):
                k = nadj_k[p]
                if S[lay[8] + k] > 1:
                    w += weight[m + k]
            if x < 0 or s * bw < bs * w:
                x, bs, bw = v, s, w
    a, low = -1, 0
    for c in range(d):
        if S[lay[2] + x * d + c]:
            u = S[lay[0] + x * d + c]
            if a < 0 or u < low or (u == low and c == best[x]):
                a, low = c, u
    return x, a


@jit
def cost_of(best_try, U0, T, boff, bdj, bvar, nptr, nscope, nstride, noff, NT, c00, top, n, m, k):
    """The original cost of a complete assignment."""
    total = c00
    for v in range(n):
        total += U0[v, best_try[v]]
    for j in range(m):
        total += T[boff[j] + best_try[bvar[2 * j]] * bdj[j] + best_try[bvar[2 * j + 1]]]
    for j in range(k):
        i = noff[j]
        for p in range(nptr[j], nptr[j + 1]):
            i += best_try[nscope[p]] * nstride[p]
        total += NT[i]
    return min(total, top)


@jit
def run(S, lay, U0, c00, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, nptr, nscope, nstride, noff, NT,
        nadj_ptr, nadj_k, top, res, weight, trail, stamp, ctl, queue, inq, dvar, dval, dbranch, dmark, dlb,
        best, scratch, inr, tmp, node_limit):
    """Search until `node_limit` more nodes, a new incumbent, completion, or a full trail."""
    n, m, k = lay[6], lay[7], lay[9]
    stop_at = ctl[NODES] + node_limit
    while True:
        mode = ctl[MODE]
        if mode == PROPAGATE:
            ok = propagate(S, lay, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, nptr, nscope, nstride, noff,
                           NT, nadj_ptr, nadj_k, top, res, weight, trail, stamp, ctl, queue, inq, inr, tmp)
            clear_queue(ctl, queue, inq, inr)
            if not ok:
                ctl[FAILS] += 1
                if ctl[DEPTH] > 0:
                    ctl[LAST] = dvar[ctl[DEPTH] - 1]
                ctl[MODE] = BACKTRACK
                continue
            done = True
            for v in range(n):
                if S[lay[3] + v] > 1:
                    done = False
                    break
            if done:
                for v in range(n):
                    scratch[v] = value_of(S, lay, v)
                c = cost_of(scratch, U0, T, boff, bdj, bvar, nptr, nscope, nstride, noff, NT, c00, top, n, m, k)
                ctl[MODE] = BACKTRACK
                if c < ctl[UB]:
                    ctl[UB] = c
                    best[:] = scratch
                    return FOUND
                continue
            ctl[MODE] = BRANCH
        elif mode == BRANCH:
            if ctl[NODES] >= stop_at:
                return PAUSED
            if ctl[TRAIL] + S.shape[0] > trail.shape[0]:
                return GROW
            ctl[NODES] += 1
            x, a = choose(S, lay, adj_ptr, adj_k, adj_side, bvar, nadj_ptr, nadj_k, weight, best, ctl)
            dep = ctl[DEPTH]
            dvar[dep], dval[dep], dbranch[dep], dmark[dep], dlb[dep] = x, a, LEFT, ctl[TRAIL], S[0]
            ctl[DEPTH] = dep + 1
            ctl[LEVEL] += 1
            for c in range(lay[1]):
                if c != a and S[lay[2] + x * lay[1] + c]:
                    remove(S, lay, x, c, trail, stamp, ctl, queue, inq)
            ctl[MODE] = PROPAGATE
        else:  # BACKTRACK
            while True:
                dep = ctl[DEPTH]
                if dep == 0:
                    return COMPLETE
                top_d = dep - 1
                mark = dmark[top_d]
                for t in range(ctl[TRAIL] - 1, mark - 1, -1):
                    S[trail[t, 0]] = trail[t, 1]
                ctl[TRAIL] = mark
                if dbranch[top_d] == LEFT:
                    if ctl[TRAIL] + S.shape[0] > trail.shape[0]:
                        return GROW
                    dbranch[top_d] = RIGHT
                    ctl[LEVEL] += 1
                    remove(S, lay, dvar[top_d], dval[top_d], trail, stamp, ctl, queue, inq)
                    ctl[MODE] = PROPAGATE
                    break
                ctl[DEPTH] = dep - 1
