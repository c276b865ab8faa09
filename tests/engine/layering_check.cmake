# Include rules of the engine that the library targets cannot enforce (engine/ is one library, and models/ links it):
#   - engine/ includes nothing from models/: it sees a model only through base_model.h and model_type.h;
#   - engine/checkpoint/ includes nothing from engine/training/: the trainer calls the checkpoint engine, not the
#     other way round.
# Run by ctest as `cmake -DSOURCE_DIR=<repository>/src/fast_llm -P layering_check.cmake`; fails naming every include
# that breaks a rule.

# check_includes(FOLDER PREFIX): no file under SOURCE_DIR/FOLDER includes "fast_llm/PREFIX...".
function(check_includes folder prefix)
  file(GLOB_RECURSE files "${SOURCE_DIR}/${folder}/*.h" "${SOURCE_DIR}/${folder}/*.cpp" "${SOURCE_DIR}/${folder}/*.cuh"
       "${SOURCE_DIR}/${folder}/*.cu")
  foreach(file IN LISTS files)
    file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]fast_llm/${prefix}")
    foreach(include IN LISTS includes)
      file(RELATIVE_PATH name "${SOURCE_DIR}" "${file}")
      string(STRIP "${include}" include)
      list(APPEND violations "${name}: ${include} (${folder}/ must not include fast_llm/${prefix})")
    endforeach()
  endforeach()
  set(violations "${violations}" PARENT_SCOPE)
endfunction()

if(NOT IS_DIRECTORY "${SOURCE_DIR}/engine")
  message(FATAL_ERROR "SOURCE_DIR (${SOURCE_DIR}) is not src/fast_llm")
endif()
set(violations "")
check_includes(engine models/)
check_includes(engine/checkpoint engine/training/)
if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "layering broken:\n  ${text}")
endif()
message(STATUS "engine layering: ok")
