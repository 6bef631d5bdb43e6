module github.com/sqsworker/sqsworker/infra/examplehandler

go 1.26.0
