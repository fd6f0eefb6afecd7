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
	// ErrUnsupportedType means an object cannot be encoded by this codec.
	ErrUnsupportedType = errors.New("codec: unsupported object type")
)
