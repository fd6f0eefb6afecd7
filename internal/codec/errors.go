package codec

import "errors"

var (
	// ErrUnknownCodec means a record names a codec this build cannot decode.
	ErrUnknownCodec = errors.New("codec: unknown codec")
	// ErrWrongKey means a sealed payload could not be opened: the key is
	// missing from the keyring or is not the one it was sealed with.
	ErrWrongKey = errors.New("codec: cannot decrypt payload: wrong or missing key")
	// ErrEncrypted means a record is sealed but no keyring was given.
	ErrEncrypted = errors.New("codec: payload is encrypted and no key was given")
	// ErrUnsupportedType means an object cannot be encoded by this codec
	// (its type is neither the informer's nor a kind of its scheme), or a
	// record names a type the codec cannot build.
	ErrUnsupportedType = errors.New("codec: unsupported object type")
	// ErrKindMismatch means a payload is of another kind than its record
	// says (the record's Type, or the informer's kind): a writer's bug or
	// a crafted file, never served as an object.
	ErrKindMismatch = errors.New("codec: payload of another kind")
)
