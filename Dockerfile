# syntax=docker/dockerfile:1
# The sqsworker CLI image that infra/'s PollerService runs on ECS Fargate
# (`sqsworker run QUEUE --http URL`). Built by `cdk deploy` (the CDK's
# Docker image asset), or by hand:
#   docker build -t sqsworker .
# The build context is the repository root: cmd/sqsworker is a module of the
# workspace (go.work) and builds against the library next to it.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS TARGETARCH
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags='-s -w' -o /out/sqsworker ./cmd/sqsworker

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sqsworker /usr/local/bin/sqsworker
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/sqsworker"]
CMD ["--help"]
