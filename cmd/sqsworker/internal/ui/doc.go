// Package ui is the web dashboard of `sqsworker ui`: queue figures with
// small charts, a dead-letter queue browser, replay with a dry run first,
// purge, and the audit log.
//
// It is a thin face over the dlq library, as the dlq commands are: listing
// is [dlq.Queue.Scan], a dry run [dlq.Queue.Plan], a replay
// [dlq.Queue.Replay] restricted to the messages the dry run showed, a purge
// [dlq.Queue.Purge]; every action is recorded through [dlq.Audit]. Queue
// figures come from a function the command gives ([Config.Stats]), the one
// `sqsworker stats` uses.
//
// Safety: the server is read-only unless [Config.AllowActions]; actions
// are POSTs that carry a CSRF token made when the server starts (compared
// in constant time), with the Origin and Host checked; a server bound to a
// non-loopback address needs an access token ([Config.Token]). Message
// bodies and attributes are sent only by the endpoint that shows one
// message, never in listings, and never logged.
//
// Limits: SQS has no paging (each read receives the messages), so a
// listing reads at most [Config.ScanMax] messages and a dry run plans at
// most as many; a request may ask for more with max, up to [MaxScanMax].
// When a listing or a dry run stops at its limit, its answer says so, with
// the queue's approximate count and how to see more, and a replay of such
// a dry run says that only its messages were acted on. A dry run is kept
// for its confirmation 15 minutes, and only the newest 32. The status of a
// replay under way is always kept; that of a finished one for
// [Config.JobRetention], and only the newest [Config.MaxFinishedJobs],
// after which it answers 410 Gone: the audit log is the lasting record.
//
// The assets (HTML, JavaScript, CSS) are embedded: no CDN, no build step.
package ui
