module github.com/gpud/gpud/bench/clients/bench_go

go 1.19

require github.com/gpud/gpud/client/go v0.0.0

// The client from this repository; nothing is downloaded (GOFLAGS=-mod=mod GOPROXY=off).
replace github.com/gpud/gpud/client/go => ../../../client/go
