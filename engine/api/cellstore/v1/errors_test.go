package cellstorev1

import "testing"

// A gRPC status made from a detail whose text holds raw bytes keeps its code and its text
// (escaped): before, the detail failed to encode and the status lost the code.
func TestStatusOfRawBytesKeepsCodeAndText(t *testing.T) {
	d := &ErrorDetail{Code: ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "split key \xff\x00é is not inside region"}
	got, ok := DetailOf(d.Status())
	if !ok || got.GetCode() != ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Fatalf("detail lost: %v %v", got, ok)
	}
	if want := `split key \xff` + "\x00é is not inside region"; got.GetMessage() != want {
		t.Fatalf("message %q, want %q", got.GetMessage(), want)
	}
	if d.WithValidUTF8() == d || (&ErrorDetail{Message: "ok"}).WithValidUTF8().GetMessage() != "ok" {
		t.Fatal("WithValidUTF8 copies only when it must escape")
	}
}
