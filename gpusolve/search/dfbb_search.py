"""The compiled search loop of `dfbb` over the propagation kernels of `dfbb_kernels`: branching, backtracking
on the trail, leaves, and the replay of an open node that starts an HBFS dive."""
from gpusolve.search.dfbb_kernels import clear_queues, jit, live, propagate, remove
from gpusolve.search.dfbb_state import (
    BACKTRACK, BACKTRACKS, BASE, BRANCH, COMPLETE, DEPTH, FAILS, FOUND, GROW, HIGH, LAST, LEFT, LEVEL, LIMIT, LOW,
    LOW_NEXT, MODE, NODES, PAUSED, PROPAGATE, RIGHT, ROOT, SPLIT, TRAIL, UB, ZLIMIT
)


@jit
def choose(S, lay, adj_ptr, adj_k, adj_side, bvar, nadj_ptr, nadj_k, weight, best, ctl):
    """(variable, value): last conflict, else least domain over weighted degree; the incumbent's value
    while it is alive, else the EAC value (as toulbar2 does)."""
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
    a = best[x]
    if a < 0 or S[lay[2] + x * d + a] == 0:
        a = S[lay[13] + x]  # alive with unary cost 0 at an EDAC fixpoint
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
        nadj_ptr, nadj_k, gptr, gscope, gowner, gid, gadj_ptr, gadj_p, top, hints, weight, trail, stamp, ctl, qs,
        dvar, dval, dbranch, dmark, dlb, best, scratch, tmp, node_limit):
    """Search until `node_limit` more nodes, a new incumbent, completion, or a full trail."""
    n, m, k = lay[6], lay[7], lay[9]
    stop_at = ctl[NODES] + node_limit
    while True:
        mode = ctl[MODE]
        if mode == PROPAGATE:
            ok = propagate(S, lay, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, nptr, nscope, nstride, noff,
                           NT, nadj_ptr, nadj_k, gptr, gscope, gowner, gid, gadj_ptr, gadj_p, top, hints, weight,
                           best, trail, stamp, ctl, qs, scratch, tmp)
            clear_queues(ctl, qs)
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
                    scratch[v] = live(S, lay, v, 0)
                c = cost_of(scratch, U0, T, boff, bdj, bvar, nptr, nscope, nstride, noff, NT, c00, top, n, m, k)
                ctl[MODE] = BACKTRACK
                if c < ctl[UB]:
                    ctl[UB] = c
                    for v in range(n):  # not best[:] = scratch, which may allocate a copy
                        best[v] = scratch[v]
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
            b = LEFT
            if S[lay[3] + x] > ctl[SPLIT]:
                a, b = split(S, lay, x, a)
            dep = ctl[DEPTH]
            if dep == 0:
                ctl[ROOT] = ctl[TRAIL]
            dvar[dep], dval[dep], dbranch[dep], dmark[dep], dlb[dep] = x, a, b, ctl[TRAIL], S[0]
            ctl[DEPTH] = dep + 1
            ctl[LEVEL] += 1
            take(S, lay, x, a, b, trail, stamp, ctl, qs)
            ctl[MODE] = PROPAGATE
        else:  # BACKTRACK
            if ctl[BACKTRACKS] == ctl[ZLIMIT]:
                return LIMIT
            ctl[BACKTRACKS] += 1
            while True:
                dep = ctl[DEPTH]
                if dep == ctl[BASE]:
                    return COMPLETE
                top_d = dep - 1
                mark = dmark[top_d]
                for t in range(ctl[TRAIL] - 1, mark - 1, -1):
                    S[trail[t, 0]] = trail[t, 1]
                ctl[TRAIL] = mark
                if dbranch[top_d] % 2 == 0:  # its second branch
                    if ctl[TRAIL] + S.shape[0] > trail.shape[0]:
                        return GROW
                    dbranch[top_d] += 1
                    ctl[LEVEL] += 1
                    take(S, lay, dvar[top_d], dval[top_d], dbranch[top_d], trail, stamp, ctl, qs)
                    ctl[MODE] = PROPAGATE
                    break
                ctl[DEPTH] = dep - 1


@jit
def split(S, lay, x, a):
    """(the middle of x's live range, LOW or HIGH: the half holding a first)."""
    lo, hi = a, a
    for t in range(S[lay[3] + x]):
        v = live(S, lay, x, t)
        lo, hi = min(lo, v), max(hi, v)
    middle = (lo + hi) // 2
    return middle, LOW if a <= middle else HIGH


@jit
def take(S, lay, x, a, branch, trail, stamp, ctl, qs):
    """The decision `branch` on x and a (see dfbb_state), on a domain that keeps a value."""
    if branch == RIGHT:
        if S[lay[2] + x * lay[1] + a]:
            remove(S, lay, x, a, trail, stamp, ctl, qs)
        return
    below = branch == LOW or branch == LOW_NEXT  # the values kept: those <= a; else those > a
    for t in range(S[lay[3] + x] - 1, -1, -1):  # from the last, as in prune
        v = live(S, lay, x, t)
        if (v != a) if branch == LEFT else ((v <= a) != below):
            remove(S, lay, x, v, trail, stamp, ctl, qs)


@jit
def replay(S, lay, trail, stamp, ctl, qs, dvar, dval, dbranch, depth):
    """The node of the decisions dvar, dval, dbranch[:depth], from the root's state with all of them taken
    at once (one propagation), as the base of a new dive."""
    for t in range(ctl[TRAIL] - 1, ctl[ROOT] - 1, -1):
        S[trail[t, 0]] = trail[t, 1]
    ctl[TRAIL] = ctl[ROOT]
    ctl[LEVEL] += 1
    for i in range(depth):
        take(S, lay, dvar[i], dval[i], dbranch[i], trail, stamp, ctl, qs)
    ctl[DEPTH] = ctl[BASE] = depth
    ctl[BACKTRACKS] = 0
    ctl[MODE] = PROPAGATE
