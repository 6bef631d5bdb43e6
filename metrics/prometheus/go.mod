module github.com/sqsworker/sqsworker/metrics/prometheus

go 1.26

require github.com/sqsworker/sqsworker v0.0.0

require github.com/prometheus/client_golang v1.25.0 // indirect

replace github.com/sqsworker/sqsworker => ../..
