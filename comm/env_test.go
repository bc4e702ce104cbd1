package comm_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/comm"
)

func TestParseEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want comm.Env
		errs []string // every one must appear in the error
	}{{
		name: "nothing: one process",
		env:  map[string]string{"HOME": "/root"},
		want: comm.Env{Launcher: comm.NoLauncher, Rank: 0, WorldSize: 1, LocalRank: 0, LocalWorldSize: 1},
	}, {
		name: "torchrun",
		env: map[string]string{"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
			"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},
		want: comm.Env{Launcher: comm.Torchrun, Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, MasterAddr: "10.0.0.1", MasterPort: 29500},
	}, {
		name: "deepspeed launcher names the local size LOCAL_SIZE",
		env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_SIZE": "2",
			"CROSS_RANK": "0", "CROSS_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
		want: comm.Env{Launcher: comm.Torchrun, Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 29500},
	}, {
		name: "rank and world size only: local place unknown",
		env:  map[string]string{"RANK": "0", "WORLD_SIZE": "1"},
		want: comm.Env{Launcher: comm.Torchrun, Rank: 0, WorldSize: 1, LocalRank: -1, LocalWorldSize: -1},
	}, {
		name: "LOCAL_RANK without a local size (torch.distributed.launch --use_env)",
		env:  map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"},
		want: comm.Env{Launcher: comm.Torchrun, Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: -1},
	}, {
		name: "open mpi",
		env: map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3",
			"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"},
		want: comm.Env{Launcher: comm.OpenMPI, Rank: 2, WorldSize: 3, LocalRank: 2, LocalWorldSize: 3},
	}, {
		name: "open mpi with agreeing torchrun variables (DeepSpeed mpi_discovery)",
		env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
			"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h0", "MASTER_PORT": "29500"},
		want: comm.Env{Launcher: comm.OpenMPI, Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "h0", MasterPort: 29500},
	}, {
		name: "RANK without WORLD_SIZE",
		env:  map[string]string{"RANK": "0"},
		errs: []string{"RANK is set but WORLD_SIZE is not"},
	}, {
		name: "WORLD_SIZE without RANK",
		env:  map[string]string{"WORLD_SIZE": "2", "LOCAL_RANK": "0"},
		errs: []string{"WORLD_SIZE is set but RANK is not"},
	}, {
		name: "local variables alone",
		env:  map[string]string{"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
		errs: []string{"LOCAL_RANK is set but RANK and WORLD_SIZE are not", "LOCAL_WORLD_SIZE is set but RANK and WORLD_SIZE are not"},
	}, {
		name: "local size without LOCAL_RANK",
		env:  map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
		errs: []string{"LOCAL_WORLD_SIZE is set but LOCAL_RANK is not"},
	}, {
		name: "LOCAL_WORLD_SIZE and LOCAL_SIZE disagree",
		env:  map[string]string{"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "LOCAL_SIZE": "4"},
		errs: []string{"LOCAL_WORLD_SIZE=2 disagrees with LOCAL_SIZE=4"},
	}, {
		name: "not integers, every problem reported",
		env:  map[string]string{"RANK": "one", "WORLD_SIZE": "0", "MASTER_ADDR": "h", "MASTER_PORT": "http"},
		errs: []string{`RANK="one" is not an integer`, "WORLD_SIZE=0 must be at least 1", `MASTER_PORT="http" is not an integer`},
	}, {
		name: "rank beyond the world",
		env:  map[string]string{"RANK": "4", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"},
		errs: []string{"rank 4 is not below the world size 4"},
	}, {
		name: "inconsistent local place",
		env:  map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"},
		errs: []string{"local world size 4 exceeds the world size 2", "local rank 3 exceeds the rank 0"},
	}, {
		name: "too few ranks after a local rank",
		env:  map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
		errs: []string{"rank 3 of 4 cannot be local rank 0 of 2"},
	}, {
		name: "partial open mpi",
		env:  map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
		errs: []string{"Open MPI variables are partial: OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE not set"},
	}, {
		name: "open mpi and torchrun disagree",
		env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "RANK": "0", "WORLD_SIZE": "2"},
		errs: []string{"RANK=0 disagrees with OMPI_COMM_WORLD_RANK=1"},
	}, {
		name: "master address without port",
		env:  map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h"},
		errs: []string{"MASTER_ADDR is set but MASTER_PORT is not"},
	}, {
		name: "master address without port under mpirun: a warning, and ignored",
		env: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "node17"},
		want: comm.Env{Launcher: comm.OpenMPI, Rank: 0, WorldSize: 2, LocalRank: 0, LocalWorldSize: 2,
			Warnings: []string{"MASTER_ADDR is set but MASTER_PORT is not: ignored, since mpirun's OMPI_COMM_WORLD_* variables name the job"}},
	}, {
		name: "mpirun with DeepSpeed's torchrun variables and a bad rendezvous pair",
		env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
			"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "", "MASTER_PORT": "99999"},
		want: comm.Env{Launcher: comm.OpenMPI, Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2,
			Warnings: []string{"MASTER_PORT=99999 is not a port (1..65535); MASTER_ADDR is empty: ignored, since mpirun's OMPI_COMM_WORLD_* variables name the job"}},
	}, {
		name: "master address without port under torchrun variables alone stays an error",
		env:  map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "node17"},
		errs: []string{"MASTER_ADDR is set but MASTER_PORT is not"},
	}, {
		name: "port out of range",
		env:  map[string]string{"MASTER_ADDR": "h", "MASTER_PORT": "70000"},
		errs: []string{"MASTER_PORT=70000 is not a port"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := comm.ParseEnv(tt.env)
			if tt.errs == nil {
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(tt.want, got); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %+v, want an error", got)
			}
			for _, e := range tt.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error lacks %q:\n%v", e, err)
				}
			}
		})
	}
}

func TestEnvMap(t *testing.T) {
	got := comm.EnvMap([]string{"A=1", "B=x=y", "NOEQ", "A=2"})
	if d := cmp.Diff(map[string]string{"A": "2", "B": "x=y"}, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestMesh(t *testing.T) {
	m, err := comm.NewMesh(8, 4)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int{4, 5, 6, 7}, m.ShardGroup(6)); d != "" {
		t.Errorf("ShardGroup(6) (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int{2, 6}, m.ReplicaGroup(6)); d != "" {
		t.Errorf("ReplicaGroup(6) (-want +got):\n%s", d)
	}
	for r := range m.World {
		rep, s := m.Coords(r)
		if m.Rank(rep, s) != r {
			t.Errorf("Rank(Coords(%d)) = %d", r, m.Rank(rep, s))
		}
	}
	for _, bad := range [][2]int{{8, 3}, {0, 1}, {4, 0}} {
		if _, err := comm.NewMesh(bad[0], bad[1]); err == nil {
			t.Errorf("NewMesh(%d, %d) accepted", bad[0], bad[1])
		}
	}
}
