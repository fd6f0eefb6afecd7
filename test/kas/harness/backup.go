package harness

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// BackupEtcd takes a backup of the cluster: it stops the apiserver and
// etcd, copies etcd's data directory to dst (which must not exist), and
// starts both again. RestoreEtcd brings the cluster back to it.
func (c *Cluster) BackupEtcd(dst string) error {
	return c.offline(func() error { return copyTree(c.layout.EtcdDataDir(), dst) })
}

// RestoreEtcd restores a backup made by BackupEtcd: it stops the apiserver
// and etcd, replaces etcd's data directory by a copy of src, and starts
// both again. The cluster is back at the backup's objects and revision,
// so every resourceVersion issued since is in its future: what an
// operator's restore of etcd from a backup does.
func (c *Cluster) RestoreEtcd(src string) error {
	return c.offline(func() error {
		dir := c.layout.EtcdDataDir()
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("harness: restore: %w", err)
		}
		return copyTree(src, dir)
	})
}

// offline runs f with the apiserver and etcd stopped, then starts them.
func (c *Cluster) offline(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrStopped
	}
	err := c.stopAPIServerLocked(false)
	if c.etcd != nil {
		err = errors.Join(err, c.etcd.Stop(c.opts.StopTimeout))
		c.etcd = nil
	}
	if err != nil {
		return fmt.Errorf("harness: stop: %w", err)
	}
	if err := f(); err != nil {
		return err
	}
	if err := c.startEtcdLocked(); err != nil {
		return err
	}
	return c.startAPIServerLocked()
}

// copyTree copies the directory src to dst (regular files and directories
// only; dst must not exist).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(target, 0o700)
		case d.Type().IsRegular():
			return copyFile(path, target)
		default:
			return fmt.Errorf("harness: copy %s: not a regular file", path)
		}
	})
}

func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	return out.Sync()
}
