package daemon

import (
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/rs/zerolog"
)

// servePprof serves Go's runtime profiles (/debug/pprof/...) on addr, a
// listener of its own so the API's tokens and routes never meet it. Off unless
// --pprof-listen is given; it is for measuring the daemon (BenchmarkDaemon32
// takes a CPU profile of its concurrent rounds through it).
func servePprof(addr string, log zerolog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn().Err(err).Str("addr", addr).Msg("pprof listener not started")
		return
	}
	log.Info().Str("pprof", "http://"+ln.Addr().String()+"/debug/pprof/").Msg("profiling")
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
}
