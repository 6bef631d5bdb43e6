package sdkhttp

import "github.com/aws/aws-sdk-go-v2/service/sqs"

// CallOptions returns what to give every call of api, a client of an AWS
// service whose Options method returns O (get and set reach the HTTP
// client in an O), so that the call's request body is sent from a copy: an
// option that sets the call's HTTP client to a [Client] over api's own,
// made once, here. It returns none when api has no such Options method
// (a test double, a wrapper of the client), when its HTTP client is nil,
// or when that copies bodies already.
//
// The slice is full: appending to it makes a new one, so that a caller may
// add options of its own to a call without changing it.
func CallOptions[O any](api any, get func(O) Doer, set func(*O, Doer)) []func(*O) {
	opt := option(api, 0, get, set)
	if opt == nil {
		return nil
	}
	return []func(*O){opt}
}

// SQSOptions is CallOptions for SQS: what to give every call of an
// *sqs.Client so that its request bodies are sent from copies.
func SQSOptions(api any) []func(*sqs.Options) {
	return CallOptions(api, sqsHTTP, setSQSHTTP)
}

func sqsHTTP(o sqs.Options) Doer        { return o.HTTPClient }
func setSQSHTTP(o *sqs.Options, d Doer) { o.HTTPClient = d }

// option returns an option that sets the HTTP client of a call of api to
// one that copies request bodies, over api's own widened to keep n idle
// connections per host (see widen; n <= 0: as it is), or nil when api has
// no Options method returning O, its HTTP client is nil, or that copies
// bodies already and is wide enough.
func option[O any](api any, n int, get func(O) Doer, set func(*O, Doer)) func(*O) {
	c, ok := api.(interface{ Options() O })
	if !ok {
		return nil
	}
	hc := get(c.Options())
	if hc == nil {
		return nil
	}
	inner, copies := hc, false
	if w, ok := hc.(*Client); ok {
		inner, copies = w.Next, true
	}
	wider, widened := widen(inner, n)
	if copies && !widened {
		return nil // its bodies copied already, its pool wide enough
	}
	use := Wrap(wider)
	return func(o *O) { set(o, use) }
}
