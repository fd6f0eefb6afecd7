package boltinformer_test

// Encryption keys against the file: a wrong or missing key is a
// configuration error that touches nothing; a keyring given to (or
// rotated, or turned off for) an informer whose file holds payloads of
// another key id rewrites them, so plaintext does not stay on disk.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

const secretsInformer = "v1/secrets"

// openSecrets opens path and builds the secrets informer with keyring.
func openSecrets(t *testing.T, path string, keyring *boltinformer.Keyring, mode boltinformer.InformerOptions, dbOpts boltinformer.Options) (*boltinformer.DB, *boltinformer.Informer, error) {
	t.Helper()
	dbOpts.Logger = &quietLogger
	db, err := boltinformer.Open(path, &dbOpts)
	if err != nil {
		t.Fatal(err)
	}
	o := mode
	o.ClusterID, o.Resource, o.Keyring = "c1", "/v1, Resource=secrets", keyring
	src := crashtest.NewSource(func() runtime.Object { return &corev1.SecretList{} })
	inf, err := db.NewInformer(secretsInformer, src, &corev1.Secret{}, 0, nil, &o)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, inf, nil
}

// writeSecrets makes a file at path whose secrets informer holds n synced
// Secrets, written with keyring.
func writeSecrets(t *testing.T, path string, keyring *boltinformer.Keyring, n int) {
	t.Helper()
	db, inf, err := openSecrets(t, path, keyring, boltinformer.InformerOptions{}, boltinformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs := make([]any, n)
	for i := range objs {
		objs[i] = testSecret(i)
	}
	if err := inf.GetStore().Replace(objs, "10"); err != nil {
		t.Fatal(err)
	}
	if err := inf.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func checkSecretsServed(t *testing.T, inf *boltinformer.Informer, n int) {
	t.Helper()
	for i := range n {
		s := testSecret(i)
		obj, ok, err := inf.GetIndexer().GetByKey(s.Namespace + "/" + s.Name)
		if err != nil || !ok || string(obj.(*corev1.Secret).Data["password"]) != secretPlaintext {
			t.Fatalf("GetByKey %s/%s: %v, %v, %v", s.Namespace, s.Name, obj, ok, err)
		}
	}
}

var memoryModes = map[string]boltinformer.InformerOptions{
	"full":    {},
	"bounded": {Memory: boltinformer.BoundedMemory, CacheSize: 1},
}

// TestRegressionWrongKeyIsConfigurationError: a keyring whose keys do not
// open the file's payloads (wrong key, missing key id, no keyring) was
// reported as a damaged record: a copy of the file was kept and the
// informer cold-started, deleting the sealed records at the first list.
// It is a configuration error: NewInformer fails with ErrEncryptionKey,
// the file stays byte for byte as it was, no copy is made.
func TestRegressionWrongKeyIsConfigurationError(t *testing.T) {
	k1 := testKeyring("k1", 1)
	for name, keyring := range map[string]*boltinformer.Keyring{
		"wrong key":       testKeyring("k1", 9),
		"missing key id":  testKeyring("k2", 2),
		"no keyring":      nil,
		"decrypt-only k2": {Keys: map[string][]byte{"k2": bytes.Repeat([]byte{2}, 32)}},
	} {
		for mode, mo := range memoryModes {
			for _, failOnCorrupt := range []bool{false, true} {
				t.Run(name+"/"+mode+"/failOnCorrupt="+map[bool]string{false: "false", true: "true"}[failOnCorrupt], func(t *testing.T) {
					dir := t.TempDir()
					path := filepath.Join(dir, "cache.db")
					writeSecrets(t, path, k1, 3)
					before, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					_, _, err = openSecrets(t, path, keyring, mo, boltinformer.Options{FailOnCorrupt: failOnCorrupt})
					if !errors.Is(err, boltinformer.ErrEncryptionKey) || errors.Is(err, store.ErrCorrupt) {
						t.Fatalf("NewInformer with %s: %v, want ErrEncryptionKey and not ErrCorrupt", name, err)
					}
					after, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(before, after) {
						t.Fatal("the file changed")
					}
					entries, err := os.ReadDir(dir)
					if err != nil {
						t.Fatal(err)
					}
					if len(entries) != 1 {
						var names []string
						for _, e := range entries {
							names = append(names, e.Name())
						}
						t.Fatalf("files %v: want only cache.db (no copy)", names)
					}
					// The right keyring still resumes the file.
					db, inf, err := openSecrets(t, path, k1, mo, boltinformer.Options{})
					if err != nil {
						t.Fatal(err)
					}
					defer db.Close()
					if d := inf.Decision(); !d.Warm || d.Reason != recovery.ReasonResumable {
						t.Fatalf("decision %+v with the right key", d)
					}
					checkSecretsServed(t, inf, 3)
				})
			}
		}
	}
}

// TestRegressionWrongKeyMessageNotCorrupt: the error of a keyring that
// does not open the file said, after the reason, "store: cache file is
// corrupt" (the load's wrapping of the decoding error), on two lines: a
// configuration error must not read as damage.
func TestRegressionWrongKeyMessageNotCorrupt(t *testing.T) {
	k1 := testKeyring("k1", 1)
	for name, keyring := range map[string]*boltinformer.Keyring{
		"wrong key":      testKeyring("k1", 9),
		"missing key id": testKeyring("k2", 2),
		"no keyring":     nil,
	} {
		for mode, mo := range memoryModes {
			t.Run(name+"/"+mode, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "cache.db")
				writeSecrets(t, path, k1, 3)
				_, _, err := openSecrets(t, path, keyring, mo, boltinformer.Options{})
				if !errors.Is(err, boltinformer.ErrEncryptionKey) {
					t.Fatalf("NewInformer with %s: %v, want ErrEncryptionKey", name, err)
				}
				if msg := err.Error(); strings.Contains(msg, store.ErrCorrupt.Error()) || strings.Contains(msg, "\n") || !strings.Contains(msg, "codec:") {
					t.Fatalf("NewInformer with %s: %q: want the codec's reason, on one line, without %q", name, msg, store.ErrCorrupt)
				}
			})
		}
	}
}

// TestRegressionPlaintextFileNowEncrypted: a file holding plaintext
// payloads of an informer now given a keyring kept them (and served them)
// in plaintext. The warm start rewrites them sealed; a rotation rewrites
// them with the new current key, so the old one can be dropped; a
// decrypt-only keyring (Current "") turns encryption off, rewriting them
// in plaintext.
func TestRegressionPlaintextFileNowEncrypted(t *testing.T) {
	k1 := testKeyring("k1", 1)
	k2key := bytes.Repeat([]byte{2}, 16)
	steps := []struct {
		name    string
		keyring *boltinformer.Keyring
		keyID   string // of every record after the start
		reason  string
	}{
		{"keyring given", k1, "k1", recovery.ReasonResealed},
		{"same keyring", k1, "k1", recovery.ReasonResumable},
		{"rotated", &boltinformer.Keyring{Current: "k2", Keys: map[string][]byte{"k1": k1.Keys["k1"], "k2": k2key}}, "k2", recovery.ReasonResealed},
		{"old key dropped", &boltinformer.Keyring{Current: "k2", Keys: map[string][]byte{"k2": k2key}}, "k2", recovery.ReasonResumable},
		{"decrypt only", &boltinformer.Keyring{Keys: map[string][]byte{"k2": k2key}}, "", recovery.ReasonResealed},
		{"no keyring", nil, "", recovery.ReasonResumable},
	}
	for mode, mo := range memoryModes {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache.db")
			const n = 5
			writeSecrets(t, path, nil, n)
			for _, st := range steps {
				db, inf, err := openSecrets(t, path, st.keyring, mo, boltinformer.Options{})
				if err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				// On disk before any read or commit of the informer.
				checkSealed(t, db, secretsInformer, st.keyID, n)
				if d := inf.Decision(); !d.Warm || d.Reason != st.reason {
					t.Fatalf("%s: decision %+v, want warm %q", st.name, d, st.reason)
				}
				checkSecretsServed(t, inf, n)
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestResealKeepsFileValid: after a reseal the file passes the integrity
// check (records, index entries, state) and its envelope snapshot is
// gone or valid.
func TestResealKeepsFileValid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	writeSecrets(t, path, nil, 1500) // more than one reseal transaction
	db, inf, err := openSecrets(t, path, testKeyring("k1", 1), boltinformer.InformerOptions{}, boltinformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if inf.Decision().Reason != recovery.ReasonResealed {
		t.Fatalf("decision %+v", inf.Decision())
	}
	probs, err := db.Store().Check(nil)
	if err != nil || len(probs) > 0 {
		t.Fatalf("Check after a reseal: %v %v", probs, err)
	}
	checkSealed(t, db, secretsInformer, "k1", 1500)
	if n := len(inf.GetIndexer().ListKeys()); n != 1500 {
		t.Fatalf("%d keys", n)
	}
	// The snapshot the load read named the old key ids: gone.
	err = db.Store().View(func(tx *store.Tx) error {
		_, err := tx.Snapshot(secretsInformer)
		return err
	})
	if !errors.Is(err, store.ErrNoSnapshot) {
		t.Fatalf("envelope snapshot after a reseal: %v, want ErrNoSnapshot", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
