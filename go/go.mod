module taskboard

go 1.19
