//go:build !unix

package dlq

// oNoFollow is 0 where the system has no O_NOFOLLOW: OpenAuditLog relies
// on its Lstat and Stat checks there.
const oNoFollow = 0

func isSymlinkErr(error) bool { return false }
