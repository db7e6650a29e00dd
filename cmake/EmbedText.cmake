# cmake -DINPUT=FILE -DOUTPUT=FILE.inc -P EmbedText.cmake
# Writes FILE's text as one C++ raw string literal, to #include where the
# text is needed as a value (the device math header in generated CUDA).
file(READ "${INPUT}" text)
string(FIND "${text}" ")llmopt_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the embedding's delimiter")
endif()
file(WRITE "${OUTPUT}.tmp" "R\"llmopt_embed(${text})llmopt_embed\"\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
