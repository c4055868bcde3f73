// Package configs holds no code: its test loads every file in the repository's configs/ with
// the loader that reads it, so that each one starts as written and points at what `make run`
// creates.
package configs
