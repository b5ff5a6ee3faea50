package snapshots_test

import (
	"testing"

	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
