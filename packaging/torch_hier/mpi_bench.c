/* The Open MPI anchor of torch_hier.bench: the same operations on buffers of the same sizes, timed the
 * same way (warm-up, barrier, N calls, barrier; time per call averaged over ranks).
 *
 *   mpicc -O2 -o mpi_bench mpi_bench.c
 *   mpirun -np 2 ./mpi_bench float32 plan.txt
 *
 * plan.txt holds one point per line: "<op> <count> <warmup> <iterations>", count in elements of the
 * whole buffer as torch_hier.bench sizes it (a multiple of the number of ranks). Rank 0 prints one line
 * per point: "<op> <count> <seconds per call>". bench.py writes the plan and reads the answer. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, world;

/* Rank s sends (1 + (s + d) % 3) units to rank d: bench.py's uneven all-to-all (the MoE pattern). */
static int shares(int s, int d) { return 1 + (s + d) % 3; }

static long uneven_unit(long count) {
  long widest = 0;
  for (int s = 0; s < world; ++s) {
    long sum = 0;
    for (int d = 0; d < world; ++d) sum += shares(s, d);
    if (sum > widest) widest = sum;
  }
  return count / widest > 0 ? count / widest : 1;
}

struct point {
  char op[32];
  long count;
  void *a, *b;
  int *send_counts, *send_displs, *recv_counts, *recv_displs;
};

static void run(struct point* p, MPI_Datatype type) {
  const char* op = p->op;
  int part = (int)(p->count / world);
  if (!strcmp(op, "allreduce")) {
    MPI_Allreduce(MPI_IN_PLACE, p->a, (int)p->count, type, MPI_SUM, MPI_COMM_WORLD);
  } else if (!strcmp(op, "allgather")) {
    MPI_Allgather(p->a, part, type, p->b, part, type, MPI_COMM_WORLD);
  } else if (!strcmp(op, "reduce_scatter")) {
    MPI_Reduce_scatter_block(p->a, p->b, part, type, MPI_SUM, MPI_COMM_WORLD);
  } else if (!strcmp(op, "alltoall")) {
    MPI_Alltoall(p->a, part, type, p->b, part, type, MPI_COMM_WORLD);
  } else if (!strcmp(op, "alltoall_uneven")) {
    MPI_Alltoallv(p->a, p->send_counts, p->send_displs, type, p->b, p->recv_counts, p->recv_displs, type,
                  MPI_COMM_WORLD);
  } else if (!strcmp(op, "broadcast")) {
    MPI_Bcast(p->a, (int)p->count, type, 0, MPI_COMM_WORLD);
  } else if (!strcmp(op, "reduce")) {
    /* In place on the root, as torch's reduce is. */
    MPI_Reduce(rank == 0 ? MPI_IN_PLACE : p->a, p->a, (int)p->count, type, MPI_SUM, 0, MPI_COMM_WORLD);
  } else if (!strcmp(op, "gather")) {
    MPI_Gather(p->a, part, type, p->b, part, type, 0, MPI_COMM_WORLD);
  } else if (!strcmp(op, "scatter")) {
    MPI_Scatter(p->a, part, type, p->b, part, type, 0, MPI_COMM_WORLD);
  } else if (!strcmp(op, "sendrecv")) {
    /* Ranks pair up (0-1, 2-3, ...); an odd rank out sits it out. */
    int peer = rank ^ 1;
    if (peer < world) {
      MPI_Sendrecv(p->a, (int)p->count, type, peer, 0, p->b, (int)p->count, type, peer, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
    }
  } else if (!strcmp(op, "barrier")) {
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    if (rank == 0) fprintf(stderr, "mpi_bench: unknown op %s\n", op);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

/* Writes bench.py's values, (i % 97) + 3 rank, into both buffers. A buffer calloc never wrote maps every
 * page to the kernel's one zero page, which stays in cache: Open MPI would then read its inputs from cache
 * where hier reads torch's filled tensors from memory, and the anchor would be faster than it is. */
static void fill(void* buffer, long count, MPI_Datatype type) {
  for (long i = 0; i < count; ++i) {
    double value = (double)(i % 97 + 3 * rank);
    if (type == MPI_FLOAT) {
      ((float*)buffer)[i] = (float)value;
    } else if (type == MPI_DOUBLE) {
      ((double*)buffer)[i] = value;
    } else {
      ((int*)buffer)[i] = (int)value;
    }
  }
}

static void prepare(struct point* p, int esize, MPI_Datatype type) {
  /* Every buffer holds the whole count: the widest any op needs. */
  p->a = calloc((size_t)p->count + 1, (size_t)esize);
  p->b = calloc((size_t)p->count + 1, (size_t)esize);
  p->send_counts = p->send_displs = p->recv_counts = p->recv_displs = NULL;
  if (!strcmp(p->op, "alltoall_uneven")) {
    long unit = uneven_unit(p->count);
    p->send_counts = calloc((size_t)world, sizeof(int));
    p->send_displs = calloc((size_t)world, sizeof(int));
    p->recv_counts = calloc((size_t)world, sizeof(int));
    p->recv_displs = calloc((size_t)world, sizeof(int));
    long sent = 0, received = 0;
    for (int peer = 0; peer < world; ++peer) {
      p->send_counts[peer] = (int)(shares(rank, peer) * unit);
      p->send_displs[peer] = (int)sent;
      sent += p->send_counts[peer];
      p->recv_counts[peer] = (int)(shares(peer, rank) * unit);
      p->recv_displs[peer] = (int)received;
      received += p->recv_counts[peer];
    }
    /* The widest side of an uneven exchange can exceed the even count. */
    free(p->a);
    free(p->b);
    p->a = calloc((size_t)sent + 1, (size_t)esize);
    p->b = calloc((size_t)received + 1, (size_t)esize);
    fill(p->a, sent, type);
    fill(p->b, received, type);
  } else {
    fill(p->a, p->count, type);
    fill(p->b, p->count, type);
  }
}

static void release(struct point* p) {
  free(p->a);
  free(p->b);
  free(p->send_counts);
  free(p->send_displs);
  free(p->recv_counts);
  free(p->recv_displs);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc != 3) {
    if (rank == 0) fprintf(stderr, "usage: mpi_bench float32|float64|int32 PLAN\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int esize = 0;
  if (!strcmp(argv[1], "float32")) {
    type = MPI_FLOAT, esize = 4;
  } else if (!strcmp(argv[1], "float64")) {
    type = MPI_DOUBLE, esize = 8;
  } else if (!strcmp(argv[1], "int32")) {
    type = MPI_INT, esize = 4;
  } else {
    if (rank == 0) fprintf(stderr, "mpi_bench: no MPI type for %s\n", argv[1]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  FILE* plan = fopen(argv[2], "r");
  if (!plan) {
    perror(argv[2]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  enum { kMaxPoints = 4096 };
  static struct point points[kMaxPoints];
  static int warmups[kMaxPoints], iterations[kMaxPoints];
  int n = 0;
  while (n < kMaxPoints &&
         fscanf(plan, "%31s %ld %d %d", points[n].op, &points[n].count, &warmups[n], &iterations[n]) == 4) {
    ++n;
  }
  fclose(plan);
  /* Open MPI sets up its shared-memory paths on first use of each collective: do that before timing
   * anything, so that the first point of the plan is not charged with it. */
  for (int i = 0; i < n; ++i) {
    struct point tiny = points[i];
    tiny.count = tiny.count > 0 ? world : 0;
    prepare(&tiny, esize, type);
    for (int k = 0; k < 20; ++k) run(&tiny, type);
    release(&tiny);
  }
  for (int i = 0; i < n; ++i) {
    struct point p = points[i];
    int warmup = warmups[i];
    prepare(&p, esize, type);
    for (int k = 0; k < warmup; ++k) run(&p, type);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int k = 0; k < iterations[i]; ++k) run(&p, type);
    MPI_Barrier(MPI_COMM_WORLD);
    double mine = (MPI_Wtime() - start) / iterations[i], sum = 0;
    MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("%s %ld %.9g\n", p.op, p.count, sum / world);
      fflush(stdout);
    }
    release(&p);
  }
  MPI_Finalize();
  return 0;
}
