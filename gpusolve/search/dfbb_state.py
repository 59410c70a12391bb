"""The slots and codes shared by the depth-first search's driver (dfbb) and its compiled kernels
(dfbb_kernels): the control vector, the propagation queues, what a slice ends with."""

# Control slots (ctl): where the resumable search stands.
TRAIL, DEPTH, MODE, NODES, UB, LEVEL, LAST, FAILS, DTOP, QLEN = range(10)
AC, DAC, EAC, EAC_CHECK = range(4)  # propagation queues (rows of qs); their lengths follow QLEN in ctl
N_CTL = QLEN + 4
PROPAGATE, BRANCH, BACKTRACK = 0, 1, 2  # modes
PAUSED, FOUND, COMPLETE, GROW = 0, 1, 2, 3  # what a slice ends with
LEFT, RIGHT = 0, 1
SLACK = 1
