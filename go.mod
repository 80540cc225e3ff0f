module github.com/queuekit/queue

go 1.25.0

require (
	github.com/prometheus/client_golang v1.24.1 // indirect
	github.com/stretchr/testify v1.11.1 // indirect
	golang.org/x/time v0.15.0 // indirect
)
