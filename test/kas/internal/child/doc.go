// Package child runs the harness's subprocesses: each one dies with its parent
// (PR_SET_PDEATHSIG), is stopped with SIGTERM then SIGKILL after a grace
// period, and is always waited for, so no process outlives the test or the
// `kas up` that started it.
package child
