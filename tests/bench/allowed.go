// The floor of the end-to-end benchmark: a Go net/http server that parses an AdmissionReview and answers
// "allowed", registered as the same two webhooks as ai-admission (make bench-e2e builds it when Go is there).
package main

import (
	"encoding/json"
	"net/http"
	"os"
)

type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID string `json:"uid"`
	} `json:"request,omitempty"`
	Response *struct {
		UID     string `json:"uid"`
		Allowed bool   `json:"allowed"`
	} `json:"response,omitempty"`
}

func allow(w http.ResponseWriter, r *http.Request) {
	var in review
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	out := review{APIVersion: in.APIVersion, Kind: "AdmissionReview"}
	out.Response = &struct {
		UID     string `json:"uid"`
		Allowed bool   `json:"allowed"`
	}{UID: in.Request.UID, Allowed: true}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func main() {
	http.HandleFunc("/mutate", allow)
	http.HandleFunc("/validate", allow)
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"status":"ok"}`)) })
	// usage: allowed ADDRESS CERT KEY
	if err := http.ListenAndServeTLS(os.Args[1], os.Args[2], os.Args[3], nil); err != nil {
		panic(err)
	}
}
