/*
 * tests/unit/rm_tree.h: remove a test's scratch directory tree (files
 * first, then their directories; symlinks not followed). Errors are
 * ignored: a leftover in /tmp fails no test.
 */
#ifndef TERN_TEST_RM_TREE_H
#define TERN_TEST_RM_TREE_H

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static inline int test_rm_tree_entry(const char *path,
                                     const struct stat *sb,
                                     int flag,
                                     struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Remove dir and everything below it. */
static inline void test_rm_tree(const char *dir)
{
    (void)nftw(dir, test_rm_tree_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif /* TERN_TEST_RM_TREE_H */
