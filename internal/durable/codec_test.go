package durable

import "testing"

// TestJSONCodec: the default codec of the durable stores round-trips a
// payload through encoding/json and reports what it cannot encode.
func TestJSONCodec(t *testing.T) {
	type payload struct {
		Hash string `json:"hash"`
		Port int    `json:"port"`
	}
	c := JSONCodec{}
	data, err := c.Marshal(payload{Hash: "ab", Port: 6881})
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != `{"hash":"ab","port":6881}` {
		t.Fatalf("Marshal = %s", data)
	}
	var got payload
	if err := c.Unmarshal(data, &got); err != nil || got != (payload{Hash: "ab", Port: 6881}) {
		t.Fatalf("Unmarshal = %+v, %v", got, err)
	}
	if _, err := c.Marshal(make(chan int)); err == nil {
		t.Fatal("Marshal of a channel succeeded")
	}
	if err := c.Unmarshal([]byte("not json"), &got); err == nil {
		t.Fatal("Unmarshal of bad input succeeded")
	}
}
