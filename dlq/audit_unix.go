//go:build unix

package dlq

import (
	"errors"
	"syscall"
)

// oNoFollow makes OpenFile fail on a symbolic link instead of following it.
const oNoFollow = syscall.O_NOFOLLOW

// isSymlinkErr reports whether an OpenFile error with oNoFollow says the
// path is a symbolic link.
func isSymlinkErr(err error) bool { return errors.Is(err, syscall.ELOOP) }
