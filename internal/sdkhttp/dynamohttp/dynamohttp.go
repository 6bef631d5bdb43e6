// Package dynamohttp is sdkhttp.CallOptions for DynamoDB: what to give
// every call of a *dynamodb.Client so that its request bodies are sent from
// copies (see package sdkhttp for why). It is a package of its own so that
// the runtimes, which import sdkhttp and make no DynamoDB call, do not link
// the DynamoDB client.
package dynamohttp

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// Options returns the options to give every call of api, none when api is
// not a *dynamodb.Client (nor another client with its Options method) or
// its HTTP client copies bodies already: see sdkhttp.CallOptions.
func Options(api any) []func(*dynamodb.Options) {
	return sdkhttp.CallOptions(api, httpClient, setHTTPClient)
}

func httpClient(o dynamodb.Options) sdkhttp.Doer        { return o.HTTPClient }
func setHTTPClient(o *dynamodb.Options, d sdkhttp.Doer) { o.HTTPClient = d }
