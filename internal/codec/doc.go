// Package codec turns Kubernetes objects into store records and back: the
// payload is the object in apimachinery's own encoding (raw protobuf for
// typed built-in objects, JSON for unstructured objects and types without
// protobuf), optionally sealed with AES-GCM. It owns the choice of codec
// per type and the encryption keyring.
//
// It never touches the file: it maps objects to *store.Record and back.
// It never uses msgpack for Kubernetes objects, which is lossy
// (resource.Quantity does not survive it); msgpack is only the envelope.
package codec
