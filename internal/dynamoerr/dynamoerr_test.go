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

// credsErr is the error of a DynamoDB request whose credentials could not
// be got, as the SDK wraps it: inner is the credential provider's error.
func credsErr(inner error) error {
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "PutItem",
		Err: fmt.Errorf("get identity: get credentials: failed to refresh cached credentials, %w", inner)}
}

func stsErr(code string) error {
	return &smithy.OperationError{ServiceID: "STS", OperationName: "AssumeRoleWithWebIdentity", Err: &smithy.GenericAPIError{Code: code, Message: "m"}}
}

// Credentials that could not be got: a refusal (the role to assume, no
// instance role) is NoCredentials, the operator's to fix; STS or the
// metadata service failing for now is an outage.
func TestCredentialsNotGot(t *testing.T) {
	for _, c := range []struct {
		err    error
		refuse Refusal
		outage bool
	}{
		{credsErr(stsErr("AccessDenied")), NoCredentials, false},
		{credsErr(stsErr("InvalidIdentityToken")), NoCredentials, false},
		{credsErr(errors.New("no EC2 IMDS role found")), NoCredentials, false},
		{credsErr(stsErr("IDPCommunicationError")), NotRefused, true},
		{credsErr(&smithy.OperationError{ServiceID: "ec2imds", OperationName: "GetMetadata", Err: context.DeadlineExceeded}), NotRefused, true},
		{apiErr("AccessDeniedException"), AccessDenied, false},
	} {
		if got, _ := Refused(c.err); got != c.refuse {
			t.Errorf("Refused(%v) = %v, want %v", c.err, got, c.refuse)
		}
		if got := Outage(c.err); got != c.outage {
			t.Errorf("Outage(%v) = %v, want %v", c.err, got, c.outage)
		}
	}
}

// A credentials fetch cut short by the caller (shutting down) is neither a
// refusal nor an outage; a DynamoDB-like client's own operation error (a
// wrapper's service name) is not taken for a credentials failure.
func TestCredentialsFetchCancelled(t *testing.T) {
	if got, _ := Refused(credsErr(fmt.Errorf("sts: %w", context.Canceled))); got != NotRefused {
		t.Errorf("a cancelled credentials fetch: %v, want NotRefused", got)
	}
	dax := &smithy.OperationError{ServiceID: "DAX", OperationName: "PutItem", Err: &smithy.GenericAPIError{Code: "ValidationException"}}
	if got, _ := Refused(dax); got != NotRefused {
		t.Errorf("another client's operation error: %v, want NotRefused", got)
	}
}
