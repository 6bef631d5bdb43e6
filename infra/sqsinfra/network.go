package sqsinfra

import (
	"sync"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// DefaultNetworkID is the construct id, under the stack, of the network
// that PollerServices without a Cluster or Network share.
const DefaultNetworkID = "SqsWorkerNetwork"

// NetworkProps configures a Network. Every field is optional.
type NetworkProps struct {
	// Vpc is an existing VPC for the cluster. Not with MaxAzs nor
	// VpcEndpoints. Default: a new VPC.
	Vpc awsec2.IVpc
	// MaxAzs is how many availability zones the new VPC spans. Default 2.
	MaxAzs *float64
	// VpcEndpoints gives the new VPC interface endpoints for SQS, ECR (API
	// and Docker registry) and CloudWatch Logs instead of a NAT gateway:
	// the tasks run in isolated subnets with no route to the internet.
	// The cost trade: a NAT gateway is billed by the hour plus every GB it
	// processes; each interface endpoint is billed by the hour in each
	// availability zone plus a smaller charge per GB. With two zones, four
	// interface endpoints cost more per hour than one NAT gateway: they
	// pay off with traffic (large images pulled often, many messages) or
	// when tasks must not reach the internet. The handler container then
	// reaches only these services, S3 and DynamoDB. Default false: one NAT
	// gateway for the VPC.
	VpcEndpoints bool
}

// Network is a VPC and an ECS cluster with Container Insights for
// PollerServices. Whatever the props, the new VPC has gateway endpoints for
// S3 (which ECR serves image layers from) and DynamoDB (the idempotency
// table): they are free, and spare the NAT gateway that traffic. The VPC
// logs rejected traffic to CloudWatch Logs.
//
// By default every PollerService of a stack shares one Network
// (DefaultNetwork): a VPC and a NAT gateway per service would cost a NAT
// gateway's hourly charge each.
type Network struct {
	// Construct is the scope of the resources below.
	Construct constructs.Construct
	// Vpc is the VPC.
	Vpc awsec2.IVpc
	// Cluster is the ECS cluster, with Container Insights on.
	Cluster awsecs.Cluster
	// TaskSubnets are the subnets the tasks run in: private subnets with a
	// NAT gateway, or isolated ones with VpcEndpoints.
	TaskSubnets *awsec2.SubnetSelection
}

var (
	networksMu sync.Mutex
	networks   = map[constructs.Construct]*Network{}
)

// NewNetwork defines a Network; it panics, failing synthesis, on invalid
// props.
func NewNetwork(scope constructs.Construct, id string, props *NetworkProps) *Network {
	if props == nil {
		props = &NetworkProps{}
	}
	errs := newPropErrors("Network", id)
	if props.Vpc != nil && (props.MaxAzs != nil || props.VpcEndpoints) {
		errs.add("MaxAzs and VpcEndpoints are for a new VPC: give Vpc or them, not both")
	}
	azs := errs.number("MaxAzs", props.MaxAzs, 2)
	if known(azs) && (azs < 1 || !isWhole(azs)) {
		errs.add("MaxAzs must be a whole number >= 1, got %g", azs)
	}
	errs.check()

	c := &Network{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Vpc = props.Vpc
	c.TaskSubnets = &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS}
	if c.Vpc == nil {
		vp := &awsec2.VpcProps{
			MaxAzs:      jsii.Number(azs),
			NatGateways: jsii.Number(1),
			FlowLogs: &map[string]*awsec2.FlowLogOptions{
				"FlowLogs": {TrafficType: awsec2.FlowLogTrafficType_REJECT},
			},
			GatewayEndpoints: &map[string]*awsec2.GatewayVpcEndpointOptions{
				"S3":       {Service: awsec2.GatewayVpcEndpointAwsService_S3()},
				"DynamoDB": {Service: awsec2.GatewayVpcEndpointAwsService_DYNAMODB()},
			},
		}
		if props.VpcEndpoints {
			vp.NatGateways = jsii.Number(0)
			vp.SubnetConfiguration = &[]*awsec2.SubnetConfiguration{{
				Name: jsii.String("Tasks"), SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED, CidrMask: jsii.Number(22),
			}}
			c.TaskSubnets = &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED}
		}
		vpc := awsec2.NewVpc(c.Construct, jsii.String("Vpc"), vp)
		if props.VpcEndpoints {
			for _, e := range []struct {
				id      string
				service awsec2.InterfaceVpcEndpointAwsService
			}{
				{"Sqs", awsec2.InterfaceVpcEndpointAwsService_SQS()},
				{"EcrApi", awsec2.InterfaceVpcEndpointAwsService_ECR()},
				{"EcrDocker", awsec2.InterfaceVpcEndpointAwsService_ECR_DOCKER()},
				{"Logs", awsec2.InterfaceVpcEndpointAwsService_CLOUDWATCH_LOGS()},
			} {
				// Private DNS: the SDKs' usual endpoints resolve to the
				// endpoint; its security group admits HTTPS from the VPC.
				vpc.AddInterfaceEndpoint(jsii.String(e.id), &awsec2.InterfaceVpcEndpointOptions{
					Service: e.service, PrivateDnsEnabled: jsii.Bool(true), Subnets: c.TaskSubnets,
				})
			}
		}
		c.Vpc = vpc
	}
	c.Cluster = awsecs.NewCluster(c.Construct, jsii.String("Cluster"), &awsecs.ClusterProps{
		Vpc:                 c.Vpc,
		ContainerInsightsV2: awsecs.ContainerInsights_ENABLED,
	})
	networksMu.Lock()
	networks[c.Construct] = c
	networksMu.Unlock()
	return c
}

// DefaultNetwork is the Network of scope's stack that PollerServices share
// when given no Cluster nor Network: a Network with default props, with
// the id DefaultNetworkID under the stack, defined on first use.
func DefaultNetwork(scope constructs.Construct) *Network {
	stack := awscdk.Stack_Of(scope)
	if child := stack.Node().TryFindChild(jsii.String(DefaultNetworkID)); child != nil {
		networksMu.Lock()
		defer networksMu.Unlock()
		if n, ok := child.(constructs.Construct); ok && networks[n] != nil {
			return networks[n]
		}
		panic("sqsinfra.DefaultNetwork: the stack " + *stack.StackName() + " has a construct " + DefaultNetworkID + " that is not a Network: give it another id")
	}
	return NewNetwork(stack, DefaultNetworkID, nil)
}
