//go:build !linux

package store

const mapPopulate = 0
