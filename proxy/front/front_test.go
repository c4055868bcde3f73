package front

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func withRetry(t *testing.T, c codes.Code, msg string, d time.Duration) error {
	t.Helper()
	st, err := status.New(c, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Failure
	}{
		{name: "nil", err: nil, want: Failure{HTTPStatus: 200}},
		{name: "invalid", err: status.Error(codes.InvalidArgument, "items[3].text: invalid UTF-8"),
			want: Failure{HTTPStatus: 422, Type: "invalid_request_error", Message: "items[3].text: invalid UTF-8"}},
		{name: "exhausted with retry info", err: withRetry(t, codes.ResourceExhausted, "overloaded", 2500*time.Millisecond),
			want: Failure{HTTPStatus: 429, Type: "rate_limit_error", Message: "overloaded", RetryAfter: 2500 * time.Millisecond}},
		{name: "exhausted without retry info", err: status.Error(codes.ResourceExhausted, "overloaded"),
			want: Failure{HTTPStatus: 429, Type: "rate_limit_error", Message: "overloaded", RetryAfter: time.Second}},
		{name: "unavailable", err: status.Error(codes.Unavailable, "no node"),
			want: Failure{HTTPStatus: 503, Type: "service_unavailable", Message: "no node"}},
		{name: "deadline", err: status.Error(codes.DeadlineExceeded, ""),
			want: Failure{HTTPStatus: 504, Type: "timeout", Message: "Gateway Timeout"}},
		{name: "wrapped context deadline", err: fmt.Errorf("batch 1: %w", context.DeadlineExceeded),
			want: Failure{HTTPStatus: 504, Type: "timeout", Message: "batch 1: context deadline exceeded"}},
		{name: "canceled", err: context.Canceled,
			want: Failure{HTTPStatus: 499, Type: "canceled", Message: "context canceled"}},
		{name: "unimplemented", err: status.Error(codes.Unimplemented, "no"),
			want: Failure{HTTPStatus: 501, Type: "not_implemented", Message: "no"}},
		{name: "plain error", err: errors.New("boom"),
			want: Failure{HTTPStatus: 500, Type: "internal_error", Message: "boom"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, Classify(tc.err)); d != "" {
				t.Errorf("Classify (-want +got):\n%s", d)
			}
		})
	}
}

func TestToStatusError(t *testing.T) {
	if got := status.Code(ToStatusError(fmt.Errorf("x: %w", context.DeadlineExceeded))); got != codes.DeadlineExceeded {
		t.Errorf("code = %v, want DeadlineExceeded", got)
	}
	if ToStatusError(nil) != nil {
		t.Error("ToStatusError(nil) != nil")
	}
}

func TestRetryAfterHeader(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "1", 300 * time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", 30 * time.Second: "30"} {
		if got := RetryAfterHeader(d); got != want {
			t.Errorf("RetryAfterHeader(%s) = %q, want %q", d, got, want)
		}
	}
}
