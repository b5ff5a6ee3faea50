// Measures three claims about tebeka/selenium against a recording W3C server
// (see docs/decisions.md, "Appium client"). Run: cd appium/testdata/tebeka-exp && go run .
package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tebeka/selenium"
)

func main() {
	var mu sync.Mutex
	var log []string
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		log = append(log, fmt.Sprintf("%s %s content-type=%q body=%s", r.Method, r.URL.Path, r.Header.Get("Content-Type"), b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "POST" && r.URL.Path == "/session":
			if hang.Load() {
				<-block
			}
			fmt.Fprint(w, `{"value":{"sessionId":"new-1","capabilities":{"platformName":"Android"}}}`)
		default:
			fmt.Fprint(w, `{"value":"<hierarchy/>"}`)
		}
	}))
	defer srv.Close()

	// 1. Attach to an existing session "existing-42": the only constructor is NewRemote.
	wd, err := selenium.NewRemote(selenium.Capabilities{"platformName": "Android", "appium:automationName": "UiAutomator2"}, srv.URL)
	if err != nil {
		panic(err)
	}
	wd.SwitchSession("existing-42")
	wd.PageSource()
	mu.Lock()
	for _, l := range log {
		fmt.Println("request:", l)
	}
	log = nil
	mu.Unlock()
	fmt.Printf("package-global client: selenium.HTTPClient == http.DefaultClient: %v, Timeout=%v\n", selenium.HTTPClient == http.DefaultClient, selenium.HTTPClient.Timeout)

	// 2. No context: a hanging server blocks NewRemote until the global client gives up.
	hang.Store(true)
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := selenium.NewRemote(selenium.Capabilities{"platformName": "Android"}, srv.URL)
		done <- err
	}()
	select {
	case err := <-done:
		fmt.Printf("hanging server: NewRemote returned after %v: %v\n", time.Since(start), err)
	case <-time.After(3 * time.Second):
		fmt.Printf("hanging server: NewRemote still blocked after %v (no context, no per-call deadline)\n", time.Since(start).Round(time.Millisecond))
	}
	close(block)
}

var hang atomic.Bool
