package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat; it is 100
// on every Linux architecture Go supports.
const clockTicks = 100

// APIServerCPU returns the CPU time (user + system) the running apiserver
// process has used since it started, from /proc/<pid>/stat, with 10 ms
// resolution. It restarts from zero with each StartAPIServer.
func (c *Cluster) APIServerCPU() (time.Duration, error) {
	pid := c.APIServerPID()
	if pid == 0 {
		return 0, ErrAPIServerDown
	}
	return ProcessCPU(pid)
}

// APIServerRSS returns the resident set size of the running apiserver in
// bytes, from /proc/<pid>/status (VmRSS).
func (c *Cluster) APIServerRSS() (int64, error) {
	pid := c.APIServerPID()
	if pid == 0 {
		return 0, ErrAPIServerDown
	}
	return ProcessRSS(pid)
}

// ProcessCPU returns the user + system CPU time of process pid.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("harness: %w", err)
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that follow start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("harness: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("harness: short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("harness: malformed /proc/%d/stat", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// ProcessRSS returns the resident set size of process pid in bytes.
func ProcessRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("harness: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "123456 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb * 1024, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("harness: no VmRSS in /proc/%d/status", pid)
}
