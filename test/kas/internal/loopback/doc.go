// Package loopback is the one place where the harness chooses addresses: every
// listener of the harness is on 127.0.0.1, and nothing else is ever dialed.
package loopback
