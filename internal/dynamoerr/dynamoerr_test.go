package dynamoerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/smithy-go"
)

func apiErr(code string) error {
	return fmt.Errorf("wrapped: %w", &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "PutItem",
		Err: &smithy.GenericAPIError{Code: code, Message: "m"}})
}

func TestRefused(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Refusal
	}{
		{apiErr("ResourceNotFoundException"), TableMissing},
		{apiErr("AccessDeniedException"), AccessDenied},
		{apiErr("ExpiredTokenException"), BadCredentials},
		{apiErr("UnrecognizedClientException"), BadCredentials},
		{apiErr("ValidationException"), NotRefused},
		{apiErr("ThrottlingException"), NotRefused},
		{errors.New("plain"), NotRefused},
		{nil, NotRefused},
	} {
		if got, _ := Refused(c.err); got != c.want {
			t.Errorf("Refused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestOutage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{apiErr("ThrottlingException"), true},
		{apiErr("ProvisionedThroughputExceededException"), true},
		{context.DeadlineExceeded, true},
		{apiErr("ResourceNotFoundException"), false},
		{apiErr("AccessDeniedException"), false},
		{apiErr("ConditionalCheckFailedException"), false},
		{context.Canceled, false},
		{nil, false},
	} {
		if got := Outage(c.err); got != c.want {
			t.Errorf("Outage(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
