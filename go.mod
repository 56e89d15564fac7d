module github.com/bootstick/bootstick

go 1.25.0

require (
	go.yaml.in/yaml/v3 v3.0.4 // indirect
	k8s.io/apimachinery v0.34.4 // indirect
)
