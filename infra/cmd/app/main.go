// Command app is the example CDK app (see cdk.json): `make synth` runs it
// through the pinned CDK CLI to write the CloudFormation template to
// infra/cdk.out without AWS credentials. SQSWORKER_LAMBDA_DIR overrides the
// directory of the Lambda bootstrap (default ../bin/lambda/arm64, built by
// `make lambda`).
package main

import (
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/sqsworker/sqsworker/infra/exampleapp"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	exampleapp.New(app, &exampleapp.Props{CodeDir: os.Getenv("SQSWORKER_LAMBDA_DIR")})
	exampleapp.Check(app)
	app.Synth(nil)
}
