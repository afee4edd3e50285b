module hellostateful.local/apiprobe

go 1.22
