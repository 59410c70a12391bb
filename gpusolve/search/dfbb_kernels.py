"""The compiled propagation kernels of `dfbb` (soft arc consistency): numba functions over the flat state
vector and the trail; the search loop over them is in `dfbb_search`.

Imported only when a search runs (numba's import and its on-disk cache cost a
fraction of a second); `cache=True` makes a second process load rather than
compile them. The kernels allocate nothing and the caller holds every array,
so they run without numba's reference counting (`_nrt=False`): with it, each
call of a small kernel that LLVM does not inline counts references to each of
its array arguments, atomically, which cost more than the work itself.
"""
import numba

from gpusolve.search.dfbb_sources import fresh_jit_cache
from gpusolve.search.dfbb_state import AC, DAC, DTOP, EAC, EAC_CHECK, LEVEL, QLEN, SLACK, TRAIL, UB

fresh_jit_cache()  # before any kernel is loaded from numba's cache
jit = numba.njit(cache=True, nogil=True, _nrt=False)
# An index known to be non-negative, made unsigned: numba then leaves out the wraparound it adds to every
# signed index (three instructions an access), in the loops that evaluate pair costs (CELAR6-SUB1: 8,100-8,300
# -> 11,100 nodes per CPU-second of the searching thread, dev box).
at = numba.uint64
ROSE, FROM_ZERO = 1, 2  # what a projection did to a variable's unary costs
NARY_TUPLES = 1 << 10  # an n-ary function with more live tuples waits for its domains to shrink


@jit
def put(S, idx, val, trail, stamp, ctl):
    i = at(idx)
    if stamp[i] != ctl[LEVEL]:
        t = ctl[TRAIL]
        trail[at(t), 0] = idx
        trail[at(t), 1] = S[i]
        ctl[TRAIL] = t + 1
        stamp[i] = ctl[LEVEL]
    S[i] = val


@jit
def bcost(S, lay, k, T, boff, bdj, top, a, b):
    """Binary function k's current cost at (a of its first variable, b of its second)."""
    t = T[at(boff[k] + a * bdj[k] + b)]
    if t >= top:
        return top
    d = lay[1]
    return t - S[at(lay[4] + (2 * k) * d + a)] - S[at(lay[4] + (2 * k + 1) * d + b)]


@jit
def push(qs, row, x, ctl):
    """Put x on queue `row` unless it is there: a stack in qs[row, :n] with flags in qs[row, n:]; DAC's
    keeps only its flags and the highest flagged in ctl[DTOP], as it is taken down the order."""
    n = qs.shape[1] // 2
    if qs[row, n + x] == 0:
        qs[row, n + x] = 1
        if row == DAC:
            ctl[DTOP] = max(ctl[DTOP], x)
        else:
            qs[row, ctl[QLEN + row]] = x
        ctl[QLEN + row] += 1


@jit
def pop(qs, row, ctl):
    n = qs.shape[1] // 2
    ctl[QLEN + row] -= 1
    if row == DAC:
        x = ctl[DTOP]
        while qs[DAC, n + x] == 0:
            x -= 1
        ctl[DTOP] = x
    else:
        x = qs[row, ctl[QLEN + row]]
    qs[row, n + x] = 0
    return x


@jit
def shrunk(qs, x, ctl):
    """x lost a value: its neighbours' supports in it (simple, full, existential) are to be checked."""
    push(qs, AC, x, ctl)
    push(qs, DAC, x, ctl)
    push(qs, EAC, x, ctl)


@jit
def raised(qs, x, ctl):
    """A unary cost of x rose from zero: full supports in that value (DAC*, EAC) may be lost."""
    push(qs, DAC, x, ctl)
    push(qs, EAC, x, ctl)


@jit
def clear_queues(ctl, qs):
    n = qs.shape[1] // 2
    for row in range(qs.shape[0]):
        if row == DAC:
            qs[row, n:] = 0
        else:
            for i in range(ctl[QLEN + row]):
                qs[row, n + qs[row, i]] = 0
        ctl[QLEN + row] = 0
    ctl[DTOP] = -1


@jit
def live(S, lay, x, t):
    """The t-th live value of x, t < its domain size."""
    return S[at(lay[10] + x * lay[1] + t)]


@jit
def remove(S, lay, x, a, trail, stamp, ctl, qs):
    """Prune value a of x; False when x's domain is wiped out. a swaps places with the last live value
    (Briggs & Torczon's sparse set): undoing the size alone brings it back."""
    d, D, Q = lay[1], lay[10] + x * lay[1], lay[11] + x * lay[1]
    last = S[lay[3] + x] - 1
    b, p = S[D + last], S[Q + a]
    S[D + p], S[Q + b] = b, p
    S[D + last], S[Q + a] = a, last
    put(S, lay[2] + x * d + a, 0, trail, stamp, ctl)
    put(S, lay[3] + x, last, trail, stamp, ctl)
    shrunk(qs, x, ctl)
    return last > 0


@jit
def node_consistent(S, lay, x, top, trail, stamp, ctl, qs):
    """NC* on x: its least unary cost goes to c0, values reaching the bound are pruned."""
    d, U = lay[1], lay[0]
    low = top
    for t in range(S[lay[3] + x]):
        low = min(low, S[at(U + x * d + live(S, lay, x, t))])
    if low >= top:
        return False
    if low > 0:
        for t in range(S[lay[3] + x]):
            i = at(U + x * d + live(S, lay, x, t))
            if S[i] < top:
                put(S, i, S[i] - low, trail, stamp, ctl)
        put(S, 0, min(S[0] + low, top), trail, stamp, ctl)
    ub = ctl[UB]
    if S[0] >= ub:
        return False
    return prune(S, lay, x, ub - S[0], trail, stamp, ctl, qs)


@jit
def prune(S, lay, x, slack, trail, stamp, ctl, qs):
    """Remove x's values whose unary cost reaches `slack` (the upper bound minus c0); False on a wipe-out.
    Taken from the last live value down, so that each removal swaps in one already seen."""
    for t in range(S[lay[3] + x] - 1, -1, -1):
        a = live(S, lay, x, t)
        if S[at(lay[0] + x * lay[1] + a)] >= slack and not remove(S, lay, x, a, trail, stamp, ctl, qs):
            return False
    return True


@jit
def revise(S, lay, k, side, T, boff, bdj, bvar, top, hints, trail, stamp, ctl):
    """Give every value of k's variable on `side` a support in the other's domain, projecting
    the least cost onto its unary cost; ROSE when a unary cost rose, + FROM_ZERO when one was zero."""
    d, U, A = lay[1], lay[0], lay[2]
    y = bvar[2 * k + side]
    x = bvar[2 * k + 1 - side]
    out = 0
    only = live(S, lay, x, 0) if S[lay[3] + x] == 1 else -1  # an assigned x: its value is the support
    for t in range(S[lay[3] + y]):
        b = live(S, lay, y, t)
        if only >= 0:
            low, arg = pair_cost(S, lay, k, side, T, boff, bdj, top, b, only), only
        else:
            r = hints[at((2 * k + side) * d + b)]
            if r >= 0 and S[at(A + x * d + r)] and pair_cost(S, lay, k, side, T, boff, bdj, top, b, r) == 0:
                continue
            low, arg = top, -1
            for v in range(S[lay[3] + x]):
                a = live(S, lay, x, v)
                c = pair_cost(S, lay, k, side, T, boff, bdj, top, b, a)
                if c < low:
                    low, arg = c, a
                    if c == 0:
                        break
            hints[at((2 * k + side) * d + b)] = arg
        if low > 0:
            i = U + y * d + b
            if S[i] == 0:
                out |= FROM_ZERO
            if low >= top:
                put(S, i, top, trail, stamp, ctl)
            else:
                p = lay[4] + (2 * k + side) * d + b
                put(S, p, S[p] + low, trail, stamp, ctl)
                put(S, i, min(S[i] + low, top), trail, stamp, ctl)
            out |= ROSE
    return out


@jit
def pair_cost(S, lay, k, side, T, boff, bdj, top, b, a):
    """k's cost at value b of its variable on `side` and value a of the other."""
    if side == 0:
        return bcost(S, lay, k, T, boff, bdj, top, b, a)
    return bcost(S, lay, k, T, boff, bdj, top, a, b)


@jit
def live_tuples(S, lay, k, nptr, nscope, limit):
    """How many tuples of n-ary function k have all their values alive, or limit + 1 when more."""
    count = 1
    for p in range(nptr[k], nptr[k + 1]):
        count *= S[lay[3] + nscope[p]]
        if count > limit:
            return limit + 1
    return count


@jit
def nary_cost(S, lay, k, nptr, nscope, nstride, noff, NT, top, digit):
    """n-ary function k's current cost at the tuple of the live values numbered by `digit`."""
    d, i, drawn = lay[1], noff[k], 0
    for p in range(nptr[k], nptr[k + 1]):
        a = live(S, lay, nscope[p], digit[p - nptr[k]])
        i += a * nstride[p]
        drawn += S[lay[12] + p * d + a]
    return top if NT[i] >= top else NT[i] - drawn


@jit
def least_nary(S, lay, k, nptr, nscope, nstride, noff, NT, top, digit, low):
    """The least cost of n-ary function k over its live tuples with each value of each of its variables,
    in low[p * d + value] for the variable at position p (of k's), in one pass over the live tuples
    (digit: the tuple visited, an odometer)."""
    d, arity = lay[1], nptr[k + 1] - nptr[k]
    for p in range(arity):
        digit[p] = 0
        z = nscope[nptr[k] + p]
        for t in range(S[lay[3] + z]):
            low[p * d + live(S, lay, z, t)] = top
    while True:
        c = nary_cost(S, lay, k, nptr, nscope, nstride, noff, NT, top, digit)
        for p in range(arity):
            i = p * d + live(S, lay, nscope[nptr[k] + p], digit[p])
            low[i] = min(low[i], c)
        p = arity - 1
        while p >= 0 and digit[p] == S[lay[3] + nscope[nptr[k] + p]] - 1:
            digit[p] = 0
            p -= 1
        if p < 0:
            return
        digit[p] += 1


@jit
def project_nary(S, lay, k, p, nptr, nscope, top, low, trail, stamp, ctl):
    """AC* for n-ary function k towards its variable at position p: each value's least cost (`low`, as
    least_nary leaves it) goes onto its unary cost, as `revise` does for a binary function. Returns
    what it did as revise does, or -1 when every least cost is 0."""
    d, U = lay[1], lay[0]
    z = nscope[nptr[k] + p]
    out = -1
    for t in range(S[lay[3] + z]):
        a = live(S, lay, z, t)
        c = low[p * d + a]
        if c > 0:
            i = U + z * d + a
            out = max(out, 0)
            if S[i] == 0:
                out |= FROM_ZERO
            if c >= top:
                put(S, i, top, trail, stamp, ctl)
            else:
                j = lay[12] + (nptr[k] + p) * d + a
                put(S, j, S[j] + c, trail, stamp, ctl)
                put(S, i, min(S[i] + c, top), trail, stamp, ctl)
            out |= ROSE
    return out


@jit
def full_support(S, lay, k, side, T, boff, bdj, bvar, top, hints, tmp, trail, stamp, ctl):
    """Every value a of k's variable on `side` gets a full support b in the other's domain
    (c(a, b) + u(b) = 0): the other's unary costs are extended onto k as far as needed, then k is
    projected onto side's. Returns ROSE when a unary cost of side rose, + FROM_ZERO when one was zero;
    the extension keeps both sides' simple supports. tmp: the cost to project onto each value, then
    the values that get one."""
    d, U, P = lay[1], lay[0], lay[4]
    i, j = bvar[2 * k + side], bvar[2 * k + 1 - side]
    h = 2 * lay[7] * d + (2 * k + side) * d  # full-support residues of i's values
    rising = 0
    for t in range(S[lay[3] + i]):
        a = live(S, lay, i, t)
        if zero_pair(S, lay, k, side, T, boff, bdj, top, j, a, hints[at(h + a)]):
            continue
        low, arg = top, -1
        for v in range(S[lay[3] + j]):
            b = live(S, lay, j, v)
            c = pair_cost(S, lay, k, side, T, boff, bdj, top, a, b)
            if c < top and c + S[at(U + j * d + b)] < low:
                low, arg = c + S[at(U + j * d + b)], b
                if low == 0:
                    break
        hints[at(h + a)] = arg  # a full support once projected
        if low > 0:
            tmp[a] = low
            tmp[d + rising] = a
            rising += 1
    if rising == 0:
        return 0
    for v in range(S[lay[3] + j]):
        b = live(S, lay, j, v)
        u = S[at(U + j * d + b)]
        if u == 0:  # only a positive unary cost extends
            continue
        e = 0
        for t in range(rising):
            a = tmp[at(d + t)]
            if tmp[at(a)] < top:
                c = pair_cost(S, lay, k, side, T, boff, bdj, top, a, b)
                if c < top and tmp[at(a)] - c > e:
                    e = tmp[at(a)] - c  # at most u, as tmp[a] <= c + u
                    if e == u:
                        break
        if e > 0:
            q = P + (2 * k + 1 - side) * d + b
            put(S, q, S[q] - e, trail, stamp, ctl)
            put(S, U + j * d + b, u - e, trail, stamp, ctl)
    out = ROSE
    for t in range(rising):
        a = tmp[d + t]
        u = U + i * d + a
        if S[u] == 0:
            out |= FROM_ZERO
        if tmp[a] >= top:
            put(S, u, top, trail, stamp, ctl)
        else:
            q = P + (2 * k + side) * d + a
            put(S, q, S[q] + tmp[a], trail, stamp, ctl)
            put(S, u, min(S[u] + tmp[a], top), trail, stamp, ctl)
    return out


@jit
def zero_pair(S, lay, k, side, T, boff, bdj, top, j, a, b):
    """Is b, of j on k's other side, a full support of value a of `side`'s variable: alive, u(b) = 0, c(a, b) = 0?"""
    d = lay[1]
    return (b >= 0 and S[at(lay[2] + j * d + b)] != 0 and S[at(lay[0] + j * d + b)] == 0
            and pair_cost(S, lay, k, side, T, boff, bdj, top, a, b) == 0)


@jit
def supported(S, lay, k, side, a, T, boff, bdj, bvar, top, hints):
    """Has value a of k's variable on `side` a full support in the other's domain? The last one found
    is tried first, then the other's EAC value; the one found is kept in `hints`."""
    d, m = lay[1], lay[7]
    j = bvar[2 * k + 1 - side]
    h = 2 * m * d + (2 * k + side) * d + a
    if zero_pair(S, lay, k, side, T, boff, bdj, top, j, a, hints[at(h)]):
        return True
    b = S[lay[13] + j]
    t = 0
    while not zero_pair(S, lay, k, side, T, boff, bdj, top, j, a, b):
        if t == S[lay[3] + j]:
            return False
        b = live(S, lay, j, t)
        t += 1
    hints[h] = b
    return True


@jit
def existential_value(S, lay, i, a, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, top, hints, trail, stamp, ctl):
    """Is a, alive with u_i(a) = 0, fully supported by every neighbour of i? Then it is i's EAC value."""
    d = lay[1]
    if a < 0 or S[lay[2] + i * d + a] == 0 or S[lay[0] + i * d + a] != 0:
        return False
    for p in range(adj_ptr[i], adj_ptr[i + 1]):
        if not supported(S, lay, adj_k[p], adj_side[p], a, T, boff, bdj, bvar, top, hints):
            return False
    if S[lay[13] + i] != a:
        put(S, lay[13] + i, a, trail, stamp, ctl)
    return True


@jit
def existential(S, lay, i, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, top, hints, best, trail, stamp, ctl):
    """EAC on i: some value has a zero unary cost and a full support in every neighbour. The incumbent's
    value is tried first, then the last EAC value."""
    first, second = best[i], S[lay[13] + i]
    if existential_value(S, lay, i, first, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, top, hints, trail, stamp,
                         ctl):
        return True
    if second != first and existential_value(S, lay, i, second, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side,
                                             top, hints, trail, stamp, ctl):
        return True
    for t in range(S[lay[3] + i]):
        a = live(S, lay, i, t)
        if a != first and a != second and existential_value(S, lay, i, a, T, boff, bdj, bvar, adj_ptr, adj_k,
                                                            adj_side, top, hints, trail, stamp, ctl):
            return True
    return False


@jit
def enforce_eac(S, lay, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, top, hints, weight, best, trail, stamp,
                ctl, qs, tmp):
    """EAC (de Givry et al., IJCAI 2005) on the variables whose EAC may be lost: those on the EAC queue,
    and their later neighbours whose EAC values lost their full supports in them (earlier ones keep theirs
    by DAC*). A variable that is not EAC gets full supports in every neighbour, so all its unary costs
    rise and NC* raises c0. False when c0 reaches the upper bound."""
    while ctl[QLEN + EAC] > 0:
        x = pop(qs, EAC, ctl)
        push(qs, EAC_CHECK, x, ctl)
        for p in range(adj_ptr[x], adj_ptr[x + 1]):
            if adj_side[p] == 0:
                k = adj_k[p]
                y = bvar[2 * k + 1]
                s = S[lay[13] + y]
                if not (s >= 0 and S[lay[2] + y * lay[1] + s] and S[lay[0] + y * lay[1] + s] == 0
                        and supported(S, lay, k, 1, s, T, boff, bdj, bvar, top, hints)):
                    push(qs, EAC_CHECK, y, ctl)
    while ctl[QLEN + EAC_CHECK] > 0:
        i = pop(qs, EAC_CHECK, ctl)
        if existential(S, lay, i, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, top, hints, best, trail, stamp, ctl):
            continue
        for p in range(adj_ptr[i], adj_ptr[i + 1]):
            full_support(S, lay, adj_k[p], adj_side[p], T, boff, bdj, bvar, top, hints, tmp, trail, stamp, ctl)
        raised(qs, i, ctl)
        if not node_consistent(S, lay, i, top, trail, stamp, ctl, qs):
            for p in range(adj_ptr[i], adj_ptr[i + 1]):
                weight[adj_k[p]] += 1
            return False
    return True


@jit
def enforce_dac(S, lay, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, top, hints, weight, trail, stamp, ctl, qs, tmp):
    """DAC* down the variable order: every value of i gets a full support in each later neighbour j on the
    DAC queue (whose unary costs rose from zero or domain shrank). False on a wipe-out."""
    while ctl[QLEN + DAC] > 0:
        j = pop(qs, DAC, ctl)
        for p in range(adj_ptr[j], adj_ptr[j + 1]):
            if adj_side[p] != 1:
                continue
            k = adj_k[p]
            i = bvar[2 * k]
            out = full_support(S, lay, k, 0, T, boff, bdj, bvar, top, hints, tmp, trail, stamp, ctl)
            if not after_projection(S, lay, out, i, k, top, weight, trail, stamp, ctl, qs):
                return False
    return True


@jit
def after_projection(S, lay, out, y, k, top, weight, trail, stamp, ctl, qs):
    """What follows a projection of function k onto y's unary costs (`out`, as revise and full_support
    return it): y's EAC may have broken if a zero cost rose, and NC* on y; False (k weighted for
    dom/wdeg) when y is wiped out or c0 reaches the bound."""
    if out & FROM_ZERO:
        raised(qs, y, ctl)
    if out and not node_consistent(S, lay, y, top, trail, stamp, ctl, qs):
        weight[k] += 1
        return False
    return True


@jit
def forward_check(S, lay, x, gptr, gscope, gowner, gid, gadj_ptr, gadj_p, trail, stamp, ctl, qs):
    """x was just assigned: each hard AllDifferent over x takes x's value from its other variables
    (forward checking, the binary decomposition's arc consistency). gid[p * d + a]: the column of domain
    index a of the variable at scope position p in its AllDifferent's variable-value graph (alldiff.value_ids:
    an exempt value's column is its own, so it takes nothing). False on a wipe-out."""
    d = lay[1]
    a = live(S, lay, x, 0)
    for q in range(gadj_ptr[x], gadj_ptr[x + 1]):
        p = gadj_p[q]
        w = gid[p * d + a]
        g = gowner[p]
        for r in range(gptr[g], gptr[g + 1]):
            if r == p:
                continue
            y = gscope[r]
            for t in range(S[lay[3] + y] - 1, -1, -1):  # from the last, as in prune
                b = live(S, lay, y, t)
                if gid[r * d + b] == w and not remove(S, lay, y, b, trail, stamp, ctl, qs):
                    return False
    return True


@jit
def enforce_ac(S, lay, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, nptr, nscope, nstride, noff, NT, nadj_ptr,
               nadj_k, gptr, gscope, gowner, gid, gadj_ptr, gadj_p, top, hints, weight, trail, stamp, ctl, qs,
               scratch, tmp):
    """AC*: the neighbours of each variable on the AC queue (its domain shrank) get supports in it, through
    binary functions and the n-ary ones whose live tuples are few; an assigned variable's value leaves
    the other variables of its hard AllDifferents. False on a wipe-out."""
    m = lay[7]
    while ctl[QLEN + AC] > 0:
        x = pop(qs, AC, ctl)
        if not node_consistent(S, lay, x, top, trail, stamp, ctl, qs):  # its least cost may rise
            return False
        if S[lay[3] + x] == 1 and S[lay[5] + x] == 0:  # x just got assigned
            put(S, lay[5] + x, 1, trail, stamp, ctl)
            for p in range(nadj_ptr[x], nadj_ptr[x + 1]):
                put(S, lay[8] + nadj_k[p], S[lay[8] + nadj_k[p]] - 1, trail, stamp, ctl)
            if not forward_check(S, lay, x, gptr, gscope, gowner, gid, gadj_ptr, gadj_p, trail, stamp, ctl, qs):
                return False
        for p in range(nadj_ptr[x], nadj_ptr[x + 1]):
            k = nadj_k[p]
            q = 0
            while q < nptr[k + 1] - nptr[k] and live_tuples(S, lay, k, nptr, nscope, NARY_TUPLES) <= NARY_TUPLES:
                # after a projection the least costs of the other variables are computed again
                least_nary(S, lay, k, nptr, nscope, nstride, noff, NT, top, scratch, tmp)
                out = -1
                q = 0
                while out < 0 and q < nptr[k + 1] - nptr[k]:
                    if nscope[nptr[k] + q] != x:  # x's values keep their supports; the root's queue holds all
                        out = project_nary(S, lay, k, q, nptr, nscope, top, tmp, trail, stamp, ctl)
                    q += 1
                if out >= 0 and not after_projection(S, lay, out, nscope[nptr[k] + q - 1], m + k, top, weight, trail,
                                                     stamp, ctl, qs):
                    return False
        for p in range(adj_ptr[x], adj_ptr[x + 1]):
            k, side = adj_k[p], adj_side[p]
            y = bvar[2 * k + 1 - side]
            out = revise(S, lay, k, 1 - side, T, boff, bdj, bvar, top, hints, trail, stamp, ctl)
            if not after_projection(S, lay, out, y, k, top, weight, trail, stamp, ctl, qs):
                return False
    return True


@jit
def nc_everywhere(S, lay, trail, stamp, ctl, qs):
    """Prune every value whose unary cost plus c0 reaches the upper bound; False on a wipe-out. Needed
    only once the gap between them shrank since the last pass: every unary cost rise is followed by
    NC* on its variable, so live unary costs stay below the gap of the last pass."""
    slack = ctl[UB] - S[0]
    if slack >= S[SLACK]:
        return True
    for x in range(lay[6]):
        if not prune(S, lay, x, slack, trail, stamp, ctl, qs):
            return False
    put(S, SLACK, slack, trail, stamp, ctl)
    return True


@jit
def propagate(S, lay, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, nptr, nscope, nstride, noff, NT,
              nadj_ptr, nadj_k, gptr, gscope, gowner, gid, gadj_ptr, gadj_p, top, hints, weight, best, trail, stamp,
              ctl, qs, scratch, tmp):
    """EDAC* (EAC, DAC* and AC* with NC*) to a fixpoint, the queues taken in the paper's order; False on a
    wipe-out or when c0 reaches the upper bound. Each round that finds a variable not EAC raises c0."""
    while True:
        if not nc_everywhere(S, lay, trail, stamp, ctl, qs):
            return False
        if ctl[QLEN + EAC] == 0 and ctl[QLEN + DAC] == 0 and ctl[QLEN + AC] == 0:
            return True
        if not enforce_eac(S, lay, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, top, hints, weight, best, trail,
                           stamp, ctl, qs, tmp):
            return False
        if not enforce_dac(S, lay, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, top, hints, weight, trail, stamp, ctl,
                           qs, tmp):
            return False
        if not enforce_ac(S, lay, T, boff, bdj, bvar, adj_ptr, adj_k, adj_side, nptr, nscope, nstride, noff, NT,
                          nadj_ptr, nadj_k, gptr, gscope, gowner, gid, gadj_ptr, gadj_p, top, hints, weight, trail,
                          stamp, ctl, qs, scratch, tmp):
            return False
