//go:build rdma

#include <stdlib.h>
#include <unistd.h>
#include "common.h"

void *epsr_alloc(size_t n) {
	void *p = NULL;
	long page = sysconf(_SC_PAGESIZE);
	if (page <= 0) {
		page = 4096;
	}
	if (n == 0) {
		n = 1;
	}
	if (posix_memalign(&p, (size_t)page, n) != 0) {
		return NULL;
	}
	return p;
}

void epsr_free(void *p) { free(p); }
