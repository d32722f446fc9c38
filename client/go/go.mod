module github.com/gpud/gpud/client/go

go 1.19
