package lease

import (
	"testing"
	"time"
)

func TestConfigValidation(t *testing.T) {
	bad := []Config{
		{Lease: time.Second, HeartbeatInterval: time.Second, SelfFenceMargin: 100 * time.Millisecond, DeadMargin: time.Second},
		{Lease: 4 * time.Second, HeartbeatInterval: time.Second, SelfFenceMargin: 4 * time.Second, DeadMargin: time.Second},
		{Lease: 4 * time.Second, HeartbeatInterval: time.Second, SelfFenceMargin: time.Second},
	}
	for i, c := range bad {
		if c.Validate() == nil {
			t.Errorf("config %d accepted: %+v", i, c)
		}
	}
	if err := Default.Validate(); err != nil {
		t.Error(err)
	}
}
