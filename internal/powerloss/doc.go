// Package powerloss builds the states a file can be found in after a power
// loss, from a system-call trace of the process that wrote it, in the
// manner of ALICE (Pillai et al., "All File Systems Are Not Created Equal",
// OSDI 2014): record what the program asked of the kernel, then replay
// every order in which the disk may have persisted it.
//
// Parse reads strace output (strace -f -X raw -xx ..., see Command) and
// keeps what touches one data file: positioned writes (pwrite64), size
// changes (ftruncate, fallocate), fsync and fdatasync, the file's creation
// and fsyncs of its directory, plus marker lines the program writes to a
// second file (one write(2) each) so that the caller can tell which
// crash points came after which acknowledgement. What it cannot model it
// refuses with ErrUnsupported rather than guessing: a write(2) to the data
// file at an untracked offset, a shared writable mapping of it, a rename or
// unlink of it.
//
// The persistence model (Model) is that of a POSIX file system on a disk
// that honours flushes:
//
//   - A completed fsync or fdatasync of the file is a barrier: every write
//     and size change issued before it is on disk, in full.
//   - What was issued after the last completed barrier may be on disk in
//     any subset and any order (the page cache writes back as it likes),
//     and a write may be torn: of the sectors it covers (512 or 4096
//     bytes), any subset may have reached the disk. A sector itself is
//     atomic (old or new content, never garbage).
//   - A file the program created exists after a crash only if its
//     directory was fsynced after the creation (fsync(2): "Calling fsync()
//     does not necessarily ensure that the entry in the directory
//     containing the file has also reached disk"); until then it may be
//     absent, whatever was synced into it.
//
// Not modelled: a disk that acknowledges a flush it has not done, sectors
// that persist as garbage, the journaling details of a particular file
// system (which may make some of these states impossible on, say, ext4
// with data=ordered, or others possible), and any file but the one.
//
// Enumerate turns a Trace into States of four kinds: every prefix of the
// trace persisted in order (one per write, ALICE's "prefix" states); for
// each sync epoch, seeded samples of subsets of its recent writes persisted
// in a random order; seeded samples of a torn write; and the file absent
// while its directory entry is not durable. Each State names the range of
// crash points at which it can be found, so the caller can check it against
// what the program had acknowledged by then. Build writes a State to a
// file.
package powerloss
