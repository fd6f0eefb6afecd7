package powerloss_test

import (
	"strings"
	"testing"

	"github.com/boltinformer/boltinformer/internal/powerloss"
)

// FuzzParse: any input is parsed or refused with an error, never a panic;
// what parses is well formed, and its crash states obey the model.
func FuzzParse(f *testing.F) {
	seeds := []string{
		`100 openat(-100, "\x2f\x64\x2f\x63\x61\x63\x68\x65\x2e\x64\x62", 0x80042, 0600) = 3`,
		"1 openat(-100, \"/d/cache.db\", 0x42, 0600) = 3\n1 pwrite64(3, \"\\x01\\x02\", 2, 4096) = 2\n1 fdatasync(3) = 0\n1 pwrite64(3, \"ab\", 2, 0) = 2\n1 fdatasync(3) = 0\n",
		"1 openat(-100, \"/d/marks\", 0x441, 0600) = 5\n1 write(5, \"ack 1\\nack\", 9 <unfinished ...>\n2 fsync(3) = 0\n1 <... write resumed>) = 9\n",
		"[pid  7] 14:40:22.757657 openat(AT_FDCWD, \"/d/cache.db\", O_RDWR|O_CREAT|O_TRUNC, 0600) = 3\n1700000000.1 ftruncate(3, 16777216) = 0\nfallocate(3, 0, 0, 4096) = 0\n",
		"openat(AT_FDCWD, \"/d\", O_RDONLY|O_DIRECTORY) = 4\nfsync(4) = 0\nopenat(4, \"cache.db\", O_WRONLY|O_DSYNC) = 5\npwrite64(5, \"s\", 1, 10) = 1\nsync() = 0\n",
		"1 openat(-100, \"/d/cache.db\", 0x2) = 3\n1 pwrite64(3, \"abc\"..., 4096, 0) = 4096\n",
		"1 openat(-100, \"/d/cache.db\", 0x2) = 3\n1 mmap(NULL, 4096, PROT_READ|PROT_WRITE, MAP_SHARED, 3, 0) = 0x7f0000000000\n",
		"1 openat(-100, \"/d/cache.db\", 0x2) = 3\n1 dup2(3, 9) = 9\n1 close(3) = 0\n1 pwrite64(9, \"\\0\\177\\n\", 3, 0) = 3\n1 +++ exited with 0 +++\n",
		"1 rename(\"/d/cache.db\", \"/d/x\") = 0\n1 pwrite64(3, \"x\", 1, 0) = -1 EIO (Input/output error)\n1 exit_group(0) = ?\n",
		"1 writev(3, [{iov_base=\"abc\", iov_len=3}], 1) = 3\n--- SIGURG {si_signo=SIGURG} ---\n",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := powerloss.Parse(strings.NewReader(in), files)
		if err != nil {
			return
		}
		for _, op := range tr.Ops {
			if op.Off < 0 || op.Size < 0 || op.Off+int64(len(op.Data)) > 1<<40 || op.Size > 1<<40 {
				t.Fatalf("op out of bounds: %v", op)
			}
		}
		states := powerloss.Enumerate(tr, powerloss.Model{Seed: 1, Reorders: 3, Torn: 3, Garbage: 3})
		checkModel(t, tr, states)
		_ = tr.WithoutSyncs()
	})
}
