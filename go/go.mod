module github.com/taskboard-contract/taskboard/go

go 1.19
