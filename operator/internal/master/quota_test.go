package master

import (
	"strings"
	"testing"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
)

func TestQuotaFromSpec(t *testing.T) {
	tests := []struct {
		in      v1alpha1.QuotaSpec
		want    Quota
		wantErr string
	}{
		{in: v1alpha1.QuotaSpec{User: "alice", Limit: "100req/sec"},
			want: Quota{Subject: Subject{User: "alice"}, Type: RequestNumber, Limit: 100, TimeUnit: Second}},
		{in: v1alpha1.QuotaSpec{Table: "ns:t", ThrottleType: v1alpha1.ThrottleWrite, Limit: "10M/sec"},
			want: Quota{Subject: Subject{Table: "ns:t"}, Type: WriteSize, Limit: 10 << 20, TimeUnit: Second}},
		{in: v1alpha1.QuotaSpec{Namespace: "batch", ThrottleType: v1alpha1.ThrottleRead, Limit: "1000req/min"},
			want: Quota{Subject: Subject{Namespace: "batch"}, Type: ReadNumber, Limit: 1000, TimeUnit: Minute}},
		{in: v1alpha1.QuotaSpec{User: "bob", ThrottleType: v1alpha1.ThrottleRequest, Limit: "2G/day"},
			want: Quota{Subject: Subject{User: "bob"}, Type: RequestSize, Limit: 2 << 30, TimeUnit: Day}},
		{in: v1alpha1.QuotaSpec{User: "bob", Limit: "7B/hour"},
			want: Quota{Subject: Subject{User: "bob"}, Type: RequestSize, Limit: 7, TimeUnit: Hour}},
		{in: v1alpha1.QuotaSpec{User: "a", Limit: "100 req/sec"}, wantErr: "is not valid"},
		{in: v1alpha1.QuotaSpec{User: "a", Limit: "0req/sec"}, wantErr: "is not valid"},
		{in: v1alpha1.QuotaSpec{User: "a", Limit: "5CU/sec"}, wantErr: "is not valid"},
		{in: v1alpha1.QuotaSpec{User: "a", Limit: "999999999999999999P/sec"}, wantErr: "too large"},
		{in: v1alpha1.QuotaSpec{User: "a", Limit: "NONE"}, wantErr: "removes a quota: delete the entry"},
		{in: v1alpha1.QuotaSpec{Limit: "1req/sec"}, wantErr: "exactly one of user, table or namespace"},
		{in: v1alpha1.QuotaSpec{User: "a", Table: "t", Limit: "1req/sec"}, wantErr: "exactly one of user, table or namespace"},
		{in: v1alpha1.QuotaSpec{User: "a", ThrottleType: "SCAN", Limit: "1req/sec"}, wantErr: `throttleType "SCAN"`},
	}
	for _, tt := range tests {
		got, err := QuotaFromSpec(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%+v: error %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%+v: got %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestQuotasFromSpecRefusesDuplicates(t *testing.T) {
	_, err := QuotasFromSpec([]v1alpha1.QuotaSpec{
		{User: "alice", Limit: "100req/sec"},
		{User: "alice", Limit: "5req/sec", ThrottleType: v1alpha1.ThrottleRead},
		{User: "alice", Limit: "200req/min"},
	})
	if err == nil || !strings.Contains(err.Error(), "spec.quotas[0] and spec.quotas[2] are both a REQUEST_NUMBER throttle of user=alice") {
		t.Fatalf("error %v", err)
	}
	if k := (QuotaKey{Subject: Subject{Table: "ns:t"}, Type: WriteSize}).String(); k != "table=ns:t/WRITE_SIZE" {
		t.Errorf("key %q", k)
	}
}
