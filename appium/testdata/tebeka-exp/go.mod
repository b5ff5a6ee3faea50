module tebekaexp

go 1.26.0

require github.com/tebeka/selenium v0.9.10-0.20211105214847-e9100b7f5ac1

require (
	github.com/blang/semver v3.5.1+incompatible // indirect
	github.com/golang/protobuf v1.3.4 // indirect
	github.com/mediabuyerbot/go-crx3 v1.3.1 // indirect
)
