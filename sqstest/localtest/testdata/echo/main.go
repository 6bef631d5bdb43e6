// Command echo is the Lambda function of localtest's own tests (rie_test.go):
// it returns its event, and for an object event with one of these keys it
// does something else instead:
//
//	{"error": "msg"}   returns an error with message msg
//	{"panic": "msg"}   panics with msg
//	{"env": ["NAME"]}  returns {"NAME": value} for each variable ("" if unset)
//	{"context": true}  returns the function name, memory, ARN and the time
//	                   left before the invoke's deadline, in milliseconds
//	{"sleep": ms}      sleeps ms milliseconds, deadline or not (to run past
//	                   the timeout), then echoes the event
//
// Its directory is testdata, so ./... patterns skip it; tests build it by
// its import path with localtest.BuildBootstrap.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

type command struct {
	Error   *string  `json:"error"`
	Panic   *string  `json:"panic"`
	Env     []string `json:"env"`
	Context bool     `json:"context"`
	Sleep   int      `json:"sleep"`
}

func handle(ctx context.Context, event json.RawMessage) (any, error) {
	var c command
	if json.Unmarshal(event, &c) != nil {
		return event, nil // not an object: echo it
	}
	switch {
	case c.Error != nil:
		return nil, errors.New(*c.Error)
	case c.Panic != nil:
		panic(*c.Panic)
	case c.Env != nil:
		out := map[string]string{}
		for _, name := range c.Env {
			out[name] = os.Getenv(name)
		}
		return out, nil
	case c.Context:
		lc, _ := lambdacontext.FromContext(ctx)
		deadline, _ := ctx.Deadline()
		out := map[string]any{
			"functionName": lambdacontext.FunctionName,
			"memoryMB":     lambdacontext.MemoryLimitInMB,
			"msLeft":       time.Until(deadline).Milliseconds(),
		}
		if lc != nil {
			out["arn"] = lc.InvokedFunctionArn
			out["requestID"] = lc.AwsRequestID
		}
		return out, nil
	case c.Sleep > 0:
		time.Sleep(time.Duration(c.Sleep) * time.Millisecond)
	}
	return event, nil
}

func main() { lambda.Start(handle) }
