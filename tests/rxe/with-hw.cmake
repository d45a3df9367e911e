# Used by tests/rxe/run.sh only: -DCMAKE_PROJECT_tern_INCLUDE=<this file>.
# Adds the tests/hw targets at the end of the top-level configure when
# tests/CMakeLists.txt does not list hw (yet), so the runner works either
# way. (Deferred calls may not add subdirectories: the file is included.)
function(_tern_rxe_add_hw)
    if(NOT TARGET test_hw_verbs)
        include(${CMAKE_SOURCE_DIR}/tests/hw/CMakeLists.txt)
    endif()
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _tern_rxe_add_hw)
