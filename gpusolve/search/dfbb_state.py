"""The slots and codes shared by the depth-first search's driver (dfbb) and its compiled kernels
(dfbb_kernels): the control vector, the propagation queues, what a slice ends with."""

# Control slots (ctl): where the resumable search stands. BASE: the depth of the node the current dive
# started from (HBFS), which backtracking never goes above; ROOT: the trail's length at the root.
# SPLIT: the domain size above which a variable's domain is split in two rather than a value tried.
TRAIL, DEPTH, MODE, NODES, UB, LEVEL, LAST, FAILS, DTOP, BASE, BACKTRACKS, ZLIMIT, ROOT, SPLIT, QLEN = range(15)
AC, DAC, EAC, EAC_CHECK = range(4)  # propagation queues (rows of qs); their lengths follow QLEN in ctl
N_CTL = QLEN + 4
PROPAGATE, BRANCH, BACKTRACK = 0, 1, 2  # modes
# what a slice ends with; COMPLETE: the subtree of the dive's node is refuted, LIMIT: the dive made ZLIMIT backtracks
PAUSED, FOUND, COMPLETE, GROW, LIMIT = range(5)
# A decision's branch; the first of a choice point is even, its second the next number. x = a, then x != a;
# a domain larger than ctl[SPLIT] is split at the middle a of its live range instead (toulbar2's dichotomic
# branching), the half holding the preferred value first: x <= a then x > a, or x > a then x <= a.
LEFT, RIGHT, LOW, HIGH_NEXT, HIGH, LOW_NEXT = range(6)
SLACK = 1
