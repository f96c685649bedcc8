module github.com/txinbox/inbox

go 1.24
