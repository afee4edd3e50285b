// apiprobe runs inside a pod and calls the Kubernetes API the way an in-cluster client
// does: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the pod's
// ServiceAccount token as bearer token, and the cluster CA from the ServiceAccount volume
// (the server certificate is verified). It GETs PATH (default: the pods of the pod's own
// namespace) and exits 0 only on HTTP 200.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "apiprobe: FAIL:", err)
		os.Exit(1)
	}
}

func run() error {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT not set")
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return err
	}
	ns, err := os.ReadFile(saDir + "/namespace")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("no certificate in %s/ca.crt", saDir)
	}
	path := "/api/v1/namespaces/" + strings.TrimSpace(string(ns)) + "/pods"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	addr := net.JoinHostPort(host, port)

	// 1. plain TCP to the Service's ClusterIP (kube-proxy DNAT)
	t0 := time.Now()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("tcp %s: %w", addr, err)
	}
	conn.Close()
	fmt.Printf("tcp %s ok (%s)\n", addr, time.Since(t0).Round(time.Millisecond))

	// 2. verified TLS + bearer token
	client := &http.Client{
		Timeout:   15 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	req, err := http.NewRequest("GET", "https://"+addr+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Printf("tls ok: server certificate verified against the ServiceAccount CA (%s)\n", resp.TLS.PeerCertificates[0].Subject)
	fmt.Printf("GET %s -> %d\n", path, resp.StatusCode)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	fmt.Println("apiprobe: OK")
	return nil
}
